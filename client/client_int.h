/*
 * libtern internals shared by the files of client/ (not installed):
 *
 *   conn.c      server connections: "host:port" parsing, non-blocking
 *               sockets, buffered reads and writes; the monotonic clock
 *   result.c    result objects (fetch results, queue lists, status) built
 *               from validated response bodies
 *   producer.c  the idempotent producer: per-queue producer id and
 *               sequence numbers, rewinding and renumbering a queue's
 *               outstanding batches, the remembered batch whose outcome is
 *               unknown (for tern_produce_resend)
 *   login.c     the login of each new connection (AUTH_START /
 *               AUTH_CONTINUE with SCRAM-SHA-256 or EXTERNAL) before
 *               the engine sends requests on it
 *   engine.c    the request engine: server table, request list, one I/O
 *               step (deadlines, sending, reading, dispatch by request
 *               id), retries and leader following, synchronous runs
 *   api.c       the public calls of <tern/tern.h>: client lifetime, and
 *               for each call, building its request and reading its result
 *   admin.c     the user / grant / namespace calls and their list objects
 *
 * Calls only go down this order: api.c, admin.c -> engine.c -> login.c,
 * producer.c -> conn.c (api.c also calls producer.c, result.c and conn.c
 * directly).
 * producer.c and engine.c both walk the request list defined here.
 */
#ifndef TERN_CLIENT_INT_H
#define TERN_CLIENT_INT_H

#include <poll.h>
#include <stdint.h>

#include <tern/tern.h>

#include "auth.h"
#include "proto.h"

/* ---- Server connections (conn.c) ---- */

enum tern__conn_state {
    TERN__CONN_CLOSED = 0,
    TERN__CONN_CONNECTING,
    TERN__CONN_TLS,  /* TCP connected, TLS handshake under way */
    TERN__CONN_AUTH, /* connected, login (login.c) under way */
    TERN__CONN_READY,
};

/* One server of the cluster and our connection to it. */
struct tern__server
{
    char *addr; /* "host:port" as given or hinted; owned */
    char *host; /* owned */
    char *port; /* owned */
    int fd;     /* -1 when closed */
    enum tern__conn_state state;
    int64_t connect_deadline; /* CONNECTING and TLS */
    int connect_timeout_ms;   /* of the current attempt */
    int64_t retry_after;      /* no reconnect before this (back-off) */
    int failures;             /* consecutive connection failures */
    int hard_error;       /* the last attempt was refused or found no host (its
                             -errno) while the client never connected; else 0 */
    struct tern_wbuf out; /* frames not yet written; owned */
    size_t out_off;       /* bytes of out already written */
    uint8_t *in;          /* bytes read, not yet parsed; owned */
    size_t in_len;
    size_t in_cap;
    char errmsg[TERN_ERRMSG_SIZE]; /* why the last connection failed */
    /* TLS (tern_client_set_tls): the session of this connection, its
     * ciphertext not yet sent (AUTH_TLS_BUF bytes), the context borrowed
     * from the client. */
    struct auth_tls_ctx *tls_ctx; /* NULL: plaintext */
    struct auth_tls *tls;         /* owned; NULL when closed or plaintext */
    uint8_t *cout;                /* owned */
    size_t cout_len;
    size_t cout_off;
    /* Login (state AUTH, login.c): the SCRAM exchange (owned; NULL for
     * EXTERNAL), the request id and op of the AUTH frame awaiting its
     * answer. Reset by tern__server_close. */
    struct auth_scram_client *scram;
    uint64_t auth_id;
    uint8_t auth_op;
    int logged_in; /* the login of this connection succeeded */
    /* Liveness (engine.c, attempt deadlines): when bytes last came from
     * this server (monotonic ms; 0: never), whether a STATUS probe is
     * on the wire with no byte since, and until when the server counts
     * as silent (an attempt on it was abandoned; 0: not silent). */
    int64_t last_rx;
    int probe_pending;
    /* Frame version 2 (proto.h, HELLO): HELLO is on this connection's
     * wire; its answer said the server takes version 2 (requests then go
     * in version 2). Reset by tern__server_close. */
    int hello_sent;
    int xxh3;
    /* HELLO's answer took PROTO_FEATURE_RUNS: this connection's FETCH
     * answers come in the runs layout (proto.h). Reset with xxh3. */
    int runs;
    int64_t silent_until;
    /* Leader watch (engine.c, attempt deadlines): the request id of the
     * STATUS asked while another server is quiet (0: none on the wire;
     * reset by tern__server_close) and when it was sent. */
    uint64_t watch_id;
    int64_t watch_at;
};

/* Split "host:port" / "[v6]:port" (addr[0..len), borrowed) into s
 * (caller-owned storage; the strings it holds are owned by s until
 * tern__server_free). */
int tern__server_init(struct tern__server *s, const char *addr, size_t len);
/* Close the socket and drop buffered bytes; s stays usable. */
void tern__server_close(struct tern__server *s);
/* Close and free what s owns (not s itself). */
void tern__server_free(struct tern__server *s);
/* Start a non-blocking connect (state CONNECTING, TLS or READY; the
 * engine then moves READY to AUTH when the client logs in). tls:
 * the client's context (borrowed; NULL: plaintext): the server's
 * certificate must then chain to its CA and name s's host (an IP SAN for
 * an address, a DNS SAN for a name). */
int tern__server_connect(struct tern__server *s,
                         int64_t now,
                         int timeout_ms,
                         struct auth_tls_ctx *tls);
/* CONNECTING -> READY (or TLS) once the socket is writable; error if it
 * failed. */
int tern__server_finish_connect(struct tern__server *s, int64_t now);
/* TLS: drive the handshake with what the socket has; READY when done. 0,
 * or an error (TERN_EAUTH: the server was refused or refused us; errmsg
 * on s says why). */
int tern__server_handshake(struct tern__server *s);
/* Bytes are waiting to be written (frames or ciphertext). */
int tern__server_want_write(const struct tern__server *s);
/* Write out buffered bytes; 0 (maybe partial) or an error. */
int tern__server_flush(struct tern__server *s);
/* Read what is available into in; 0, or an error (TERN_ECLOSED on EOF). */
int tern__server_read(struct tern__server *s);

/* Monotonic milliseconds. */
int64_t tern__now_ms(void);

/* ---- Result objects (result.c) ---- */

/* Each builds a new caller-owned object from a validated response body
 * (borrowed for the call; the object keeps its own copy); NULL on ENOMEM. */
/* mode: TERN__RESULT_PLAIN (a FETCH answer without properties),
 * TERN__RESULT_PROPS (one with PROTO_FETCH_PROPS), TERN__RESULT_GET (a
 * MESSAGE_GET answer); TERN__RESULT_SKIP or'd into PLAIN or PROPS: a
 * GROUP_FETCH answer that ends with the skip tail (the request had
 * PROTO_GROUP_FETCH_SKIPPED), whose start offset and skipped count the
 * result then carries. */
#define TERN__RESULT_PLAIN 0
#define TERN__RESULT_PROPS 1
#define TERN__RESULT_GET   2
#define TERN__RESULT_RECV  3 /* a RECEIVE answer (receipts) */
#define TERN__RESULT_SKIP  4
/* Or'd into PLAIN or PROPS: a FETCH answer in the runs layout (the
 * connection that answered took PROTO_FEATURE_RUNS). */
#define TERN__RESULT_RUNS 8
/* Decode a fetch-like answer body (borrowed; fr borrows from it) in mode:
 * *fr (OUT) the messages, *skip (OUT) the skip tail ({0, 0} without
 * TERN__RESULT_SKIP). 0 or TERN_EMALFORMED. The one check of such an
 * answer: on arrival (engine.c) and when building its result. */
int tern__fetch_decode(const void *body,
                       size_t len,
                       int mode,
                       struct proto_fetch_resp *fr,
                       struct proto_group_skip *skip);
/* A fetch result that takes *body (a tern_malloc'd validated answer of
 * len bytes) on success, leaving *body NULL; on ENOMEM *body stays the
 * caller's. */
struct tern_fetch_result *tern__fetch_result_new(uint8_t **body,
                                                 size_t len,
                                                 int mode);

/* ---- props.c: message properties ---- */

/* Whether m carries properties (a key, a tag or headers). */
int tern__props_has(const struct tern_message *m);
/* Append the properties block of message i (m borrowed; now_ms the
 * producer timestamp when m has none) to w. 0, or TERN_EINVAL /
 * TERN_ETOOBIG with errmsg (TERN_ERRMSG_SIZE) naming the limit, or w's
 * error. */
int tern__props_encode(const struct tern_message *m,
                       size_t i,
                       uint64_t now_ms,
                       struct tern_wbuf *w,
                       char *errmsg);
/* Decode a block p[0..len) from the server (len 0: no properties) into
 * out (pointers borrow from p; append_ts_ms and id left alone). 0 or
 * TERN_EMALFORMED. */
int tern__props_decode(const void *p,
                       size_t len,
                       struct tern_message_props *out);
/* Header i of a block (p borrowed; OUT pointers may be NULL and borrow
 * from p): 0 or TERN_EINVAL. */
int tern__props_header(const void *p,
                       size_t len,
                       size_t i,
                       const char **name,
                       size_t *name_len,
                       const void **value,
                       size_t *value_len);
/* Parse "tagA || tagB" (NULL or blank: no tag) into tags[0..*n)
 * (caller-owned, TERN_FILTER_TAGS_MAX rows). 0 or TERN_EINVAL with
 * errmsg. */
int tern__tag_filter_parse(const char *expr,
                           char tags[][TERN_TAG_MAX + 1],
                           uint32_t *n,
                           char *errmsg);
struct tern_queue_list *tern__queue_list_new(const void *body, size_t len);
/* An empty list, to fill with tern__queue_list_add; NULL on ENOMEM. */
struct tern_queue_list *tern__queue_list_new_empty(void);
/* Append the queues of a validated QUEUE_LIST body to l; *more (OUT) is
 * the page's more byte (0 for an unpaged answer). 0 or -ENOMEM (l keeps
 * what it had). */
int tern__queue_list_add(struct tern_queue_list *l,
                         const void *body,
                         size_t len,
                         int *more);
struct tern_status *tern__status_new(const char *server,
                                     const void *body,
                                     size_t len);
/* Record where a fetch answer starts and, for a group fetch, how many
 * messages retention trimmed below it (tern_fetch_result_skipped). */
void tern__fetch_result_set_start(struct tern_fetch_result *r,
                                  uint64_t start_offset,
                                  uint64_t skipped);

/* ---- Retention (retention.c) ---- */

/* The wire settings for o (borrowed; NULL: every field default): *s
 * (OUT) has the built-in default for each default field, *mask (OUT) the
 * PROTO_SET_* bits of the fields set. 0 or TERN_EINVAL (bad overflow). */
int tern__queue_settings(const struct tern_queue_options *o,
                         struct proto_queue_settings *s,
                         uint32_t *mask);
/* Validate a QUEUE_INFO answer (engine.c): 0 or TERN_EMALFORMED. */
int tern__queue_info_check(const void *body, size_t len);
/* A new caller-owned queue info from a validated QUEUE_INFO body
 * (borrowed for the call); NULL on ENOMEM or a bad body. */
struct tern_queue_info *tern__queue_info_new(const void *body, size_t len);

/* ---- Requests and the client ---- */

enum tern__req_state {
    TERN__REQ_QUEUED = 0,
    TERN__REQ_SENT,
    TERN__REQ_DONE,
};

/* Per-queue producer state (producer.c), owned by the client. */
/* At most this many per-queue producer states are kept (producer.c,
 * "Bound"): past it, the least recently used one that no request holds is
 * dropped. */
#define TERN__PQ_MAX 65536u

struct tern__pq
{
    struct tern_list lru;   /* on c->pq_lru, most recently used last */
    struct tern__pq *hnext; /* next in its bucket of c->pq_table */
    uint32_t refs;          /* requests holding it (pq, resend_of), and pins */
    uint32_t hash;          /* of queue (producer.c) */
    char *queue;            /* owned */
    uint64_t producer_id;
    uint64_t next_seq;
    int blocked_round; /* pump round in which a batch could not be sent */
    /* The last batch of this queue that timed out (outcome unknown), for
     * tern_produce_resend: its producer id and sequence as sent, its
     * message count and checksum (to refuse a different batch). */
    int unknown_valid;
    uint64_t unknown_pid;
    uint64_t unknown_seq;
    size_t unknown_n;
    uint32_t unknown_sum;
    /* Delayed produces of this queue (api.c): their own producer id (0 =
     * take a fresh one at the next call) and next sequence number. */
    uint64_t delayed_pid;
    uint64_t delayed_seq;
};

/* One call's request, from creation to completion (engine.c). */
/* One tern_produce_async call of a merged batch (api.c produce_merge):
 * its callback and how many of the batch's messages are its own, in call
 * order. */
struct tern__part
{
    tern_produce_cb cb;
    void *arg;
    size_t n;
};

struct tern__req
{
    struct tern__req *prev;
    struct tern__req *next;
    uint8_t op;
    int leader_only; /* only a writable leader answers it: a leader-only
                        op, or a READ_LEADER fetch (PROTO_FETCH_LEADER) */
    int is_async;
    int admitted; /* async: inside the window (its deadline runs) */
    int unasked;  /* a read-ahead no call has asked for yet (api.c): no
                     deadline and no attempt timeout until tern__req_ask */
    int target;   /* fixed server index, or -1: chosen by the rules */
    enum tern__req_state state;
    uint64_t id;     /* current attempt's request id; 0 when not on the wire */
    int srv;         /* server index while SENT */
    int answered_by; /* server index of the successful answer */
    int attempts;
    int silent_aborts; /* attempts abandoned on a silent server */
    int64_t sent_at;   /* when the current attempt was sent */
    int seq_errors;
    int64_t deadline;
    int64_t not_before;
    struct tern_wbuf frame;     /* the encoded request; owned */
    struct tern__pq *pq;        /* produce only (NULL for a resend) */
    struct tern__pq *resend_of; /* tern_produce_resend: whose unknown */
    uint64_t pid;               /* produce: producer id in the frame */
    uint64_t seq;
    uint32_t msg_sum;   /* produce: tern__batch_checksum of the messages */
    uint64_t msg_bytes; /* produce: bytes of its messages in the frame
                           (4 per message plus the payload) */
    int result_mode;    /* fetch-like: TERN__RESULT_* of the answer */
    int runs; /* FETCH: answered in the runs layout (set with the answer) */
    size_t n_msgs;
    /* Outcome. */
    int status;
    char errmsg[TERN_ERRMSG_SIZE]; /* last failure seen */
    uint8_t *body;                 /* owned copy of the response body */
    size_t body_len;
    struct proto_produce_resp produce;
    tern_produce_cb cb;
    void *arg;
    /* Async produce calls merged into this batch (api.c produce_merge):
     * parts[0..n_parts) in call order, the first being cb/arg's call;
     * NULL while it carries one call. Owned. */
    struct tern__part *parts;
    size_t n_parts;
    size_t parts_cap;
    struct tern__req *done_next; /* async completions to fire */
};

/* tern_client_set_auth's settings, owned by the client (the strings
 * too; password wiped before it is freed). */
struct tern__auth
{
    int mechanism; /* TERN_AUTH_SCRAM or TERN_AUTH_EXTERNAL */
    char *user;    /* NULL: none (EXTERNAL) */
    char *password;
    char *ns; /* "" for default */
};

/* Where the client's producer id comes from (tern_client_producer_id). */
enum tern__pid_state {
    TERN__PID_UNKNOWN = 0, /* not asked yet (or the last ask failed) */
    TERN__PID_ISSUED,      /* a block from PRODUCER_INIT */
    TERN__PID_RANDOM,      /* a server without PRODUCER_INIT */
};

struct tern_client
{
    struct tern_client_options opts;
    struct tern__server **servers; /* owned */
    int n_servers;
    int leader; /* index of the leader guess */
    int leader_confirmed;
    int read_cur;         /* READ_ANY: current read server */
    int ever_connected;   /* a TCP connection to some server came up */
    uint64_t producer_id; /* 0 until pid_state is known */
    enum tern__pid_state pid_state;
    uint32_t pid_next_k;     /* ISSUED: last k used by a renumber */
    struct tern__auth *auth; /* tern_client_set_auth; owned, or NULL */
    uint64_t next_id;
    int64_t watch_next;     /* engine.c: the next leader watch round (ms) */
    uint64_t watch_term;    /* engine.c: the highest term a watch saw */
    struct tern__req *head; /* not-done requests, creation order */
    struct tern__req *tail;
    struct tern_list pq_lru; /* every state, least recently used first */
    size_t pq_max;           /* TERN__PQ_MAX (tests lower it) */
    uint64_t pq_dropped;     /* states dropped at the bound */
    /* Lookup of the states by queue name (producer.c): chained buckets, a power
     * of two, doubled when there are more states than buckets; owned. */
    struct tern__pq **pq_table;
    size_t pq_buckets;
    size_t n_pqs;
    size_t async_pending;        /* async requests not completed */
    size_t async_admitted;       /* async requests admitted to the window */
    struct tern__req *done_head; /* completed async, callbacks not fired */
    struct tern__req *done_tail;
    int in_callback;
    int closing; /* inside tern_client_free */
    /* tern_fetch's read-ahead (api.c): a plain FETCH sent ahead of the
     * call that will ask it, or NULL. Owned; on the request list until
     * answered. */
    struct tern__req *ahead;
    int round; /* pump round, for per-queue blocking */
    struct pollfd *pfds;
    struct auth_tls_ctx *tls_ctx; /* tern_client_set_tls; owned */
    char errmsg[TERN_ERRMSG_SIZE];
};

/* Take r off the wire: a SENT request is QUEUED again and its answer, if
 * one still comes, matches no request and is ignored. */
static inline void tern__req_detach(struct tern__req *r)
{
    if (r->state == TERN__REQ_SENT) {
        r->state = TERN__REQ_QUEUED;
        r->id = 0;
        r->srv = -1;
    }
}

/* ---- Login (login.c) ---- */

/* Free a (c->auth), wiping the password. NULL is a no-op. */
void tern__auth_free(struct tern__auth *a);
/* Server s just became READY and c logs in: queue AUTH_START on it
 * (state AUTH, deadline now + the request timeout). 0, or an error with
 * s->errmsg (the connection must be dropped). */
int tern__login_start(struct tern_client *c,
                      struct tern__server *s,
                      int64_t now);
/* A verified frame (header h, body borrowed) arrived on s in state AUTH.
 * 0: the exchange goes on, or it is done and s is READY. Otherwise the
 * connection must be dropped: TERN_EAUTH (refused or unproven: final,
 * s->errmsg has the server's reason) or a retryable code (the server was
 * busy or shutting down). */
int tern__login_on_frame(struct tern_client *c,
                         struct tern__server *s,
                         const struct proto_header *h,
                         const uint8_t *body);

/* ---- The idempotent producer (producer.c) ---- */

/* A random non-zero producer id. */
uint64_t tern__producer_id_new(void);
/* The producer id of a queue renumbered after TERN_ESEQUENCE: the next
 * id of the client's block, or a random one without a block. */
uint64_t tern__producer_id_next(struct tern_client *c);
/* The producer state of queue (borrowed for the call), created on first
 * use with the client's producer id and sequence 1; owned by c until
 * tern__pq_free_all. NULL on ENOMEM. */
/* The synchronous call path (api.c). tern__sync_req_new starts a call of
 * op: refuses it from a completion callback, follows the leader first
 * when discover is set (reads), allocates the request (deadline: request
 * timeout + extra_ms). On success *out is caller-owned: encode into its
 * frame, then hand it to tern__sync_call. On failure *out is NULL. */
int tern__sync_req_new(struct tern_client *c,
                       uint8_t op,
                       uint32_t extra_ms,
                       int discover,
                       struct tern__req **out);
/* tern__sync_req_new for a call to address (borrowed for the call; a
 * "host:port", added to the client's servers if new), or, when address is
 * NULL, to where reads go (the leader followed first). On failure *out
 * is NULL; a bad address is TERN_EINVAL with an errmsg naming it. */
int tern__sync_req_at(struct tern_client *c,
                      uint8_t op,
                      uint32_t extra_ms,
                      const char *address,
                      struct tern__req **out);
/* Run r (from tern__sync_req_new, consumed here) whose frame encoding
 * returned enc: on failure an errmsg naming what (the call and its
 * queue), else tern__run_sync's answer; on success done (NULL: nothing to
 * read) reads the validated answer r->body into out (it may take the
 * body: set r->body NULL) and returns 0 or an error. */
int tern__sync_call(struct tern_client *c,
                    struct tern__req *r,
                    int enc,
                    const char *what,
                    int (*done)(struct tern__req *r, void *out),
                    void *out);
struct tern__pq *tern__pq_get(struct tern_client *c, const char *queue);
/* The state of queue if the client has one (not made), else NULL. */
struct tern__pq *tern__pq_find(struct tern_client *c, const char *queue);
void tern__pq_free_all(struct tern_client *c);
/* The producer id a new state of c starts with (0 while the client's id
 * is unknown): the client's own, or a fresh one once states were dropped
 * at the bound. */
uint64_t tern__pq_first_id(struct tern_client *c);
/* A request (or a call, while it runs the engine) holds pq: it is not
 * dropped at the bound until released. */
void tern__pq_hold(struct tern__pq *pq);
void tern__pq_release(struct tern__pq *pq);
/* Check a produce call's arguments (errmsg on c) and find or make the
 * queue's producer state (OUT: *pq, borrowed from c). */
int tern__produce_check(struct tern_client *c,
                        const char *queue,
                        const struct tern_msg *msgs,
                        size_t n,
                        struct tern__pq **pq);
/* tern_produce_resend's: the same checks, the queue's state only found
 * (never made), and a batch with an unknown outcome required (OUT: *pq,
 * borrowed from c). */
int tern__resend_check(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       struct tern__pq **pq);
/* Checksum of a batch's messages, to tell a resend of the same batch from
 * another one. */
uint32_t tern__batch_checksum(const struct tern_msg *msgs, size_t n);
/* May msgs[0..n) be resent as pq's batch with an unknown outcome? 0, or
 * TERN_EINVAL with the reason in c's errmsg (queue names it there). */
int tern__produce_resend_check(struct tern_client *c,
                               const struct tern__pq *pq,
                               const char *queue,
                               const struct tern_msg *msgs,
                               size_t n);
/* Re-queue every on-the-wire produce of pq with seq >= from_seq, not to
 * be sent before not_before. */
void tern__pq_rewind(struct tern_client *c,
                     struct tern__pq *pq,
                     uint64_t from_seq,
                     int64_t not_before);
/* The oldest outstanding (not done) produce of pq, or NULL. */
struct tern__req *tern__pq_oldest(struct tern_client *c,
                                  const struct tern__pq *pq);
/* Give pq a fresh producer id and renumber its outstanding batches from 1
 * (their frames are patched), all re-queued in order. */
void tern__pq_renumber(struct tern_client *c, struct tern__pq *pq);
/* r completed with status: remember (TERN_ETIMEDOUT) or forget (a resend's
 * answer) the queue's batch with an unknown outcome. */
void tern__produce_note_outcome(const struct tern__req *r, int status);

/* ---- The request engine (engine.c) ---- */

/* Index of server addr[0..len) (borrowed), added to the server list if
 * new; -1 if the address is unusable or on ENOMEM. */
int tern__find_or_add_server(struct tern_client *c,
                             const char *addr,
                             size_t len);
/* A new request for op, deadline now + request timeout + extra_ms, not on
 * the list yet. Caller-owned until tern__submit_async (then the engine
 * frees it after its callback) or tern__req_free. NULL on ENOMEM. */
struct tern__req *tern__req_new(struct tern_client *c,
                                uint8_t op,
                                uint32_t extra_ms);
void tern__req_free(struct tern__req *r);
/* Run r (encoded, not on the list) to completion; returns r->status, with
 * the detail copied to c's errmsg on failure. r stays caller-owned. */
int tern__run_sync(struct tern_client *c, struct tern__req *r);
/* Put sync r (encoded, not on the list, caller-owned) on the list and on
 * the wire now, without waiting: tern__run_sync_listed later waits for
 * its answer, tern__req_cancel drops it. */
void tern__start_sync(struct tern_client *c, struct tern__req *r);
/* tern__run_sync for r already started with tern__start_sync. */
int tern__run_sync_listed(struct tern_client *c, struct tern__req *r);
/* Take sync r (started or done, caller-owned) off the list and the wire
 * (a late answer is dropped) and free it. */
void tern__req_cancel(struct tern_client *c, struct tern__req *r);
/* A call now waits for r (unasked until now): its deadline becomes
 * deadline and, if it is on the wire, its attempt clock starts now (the
 * server may have answered while nobody read). */
void tern__req_ask(struct tern__req *r, int64_t deadline);
/* Queue async r (encoded, cb set; ownership transferred): its deadline
 * starts when it enters the window, its callback fires from a later step
 * (or tern__cancel_all). */
void tern__submit_async(struct tern_client *c, struct tern__req *r);
/* Run one round of I/O, waiting at most until `until` (monotonic ms).
 * Returns the number of async callbacks fired or a negative code. */
int tern__step(struct tern_client *c, int64_t until);
/* Complete every pending request with TERN_ECANCELED and fire the async
 * callbacks. */
void tern__cancel_all(struct tern_client *c);
/* READ_LEADER with no confirmed leader: find the leader before a read
 * (bounded; failure is not an error, the read then goes to the guess). */
void tern__find_leader(struct tern_client *c);

#endif /* TERN_CLIENT_INT_H */
