/*
 * ternd's client protocol server (wire format: proto/include/proto.h): a uv_tcp
 * listener on client_addr and one struct node_conn per client.
 *
 * Reading: each connection has its own read buffer (up to one whole frame
 * of max_frame_bytes plus 64 KiB); node_frame_next (frame.c) decides what
 * each frame is. Requests are pipelined: every complete frame is handled
 * at once and answered by request_id, in whatever order answers are ready.
 *
 * Writes (QUEUE_CREATE/DELETE, PRODUCE, GROUP_COMMIT): on a node that is
 * not a writable leader -> TERN_ENOTLEADER with the leader's id and client
 * address from the peers table; a PRODUCE with a message above
 * max_message_bytes -> TERN_ETOOBIG (nothing is appended); below
 * min_free_disk_bytes of free space -> TERN_EFULL; otherwise the request
 * joins the batcher's open entry and is answered after the group commit
 * that covers its apply (batch.c, fsm.c).
 *
 * Reads (FETCH, QUEUE_LIST, STATUS) are served from the local index on any
 * node: a follower may serve slightly stale data, but only committed data
 * (the index holds applied entries only). Two exceptions: a FETCH with
 * PROTO_FETCH_LEADER (libtern's TERN_READ_LEADER) is served by a writable
 * leader only, others answer TERN_ENOTLEADER with the leader hint; and
 * GROUP_FETCH is served by a writable leader only, after a read barrier
 * through the log (batch.c), so a consumer never restarts below its
 * group's committed offset. Both, when parked, are refused the same way
 * if the node stops being a writable leader while they wait (the node
 * calls node_server_wake on that change). STATS answers
 * with the local raft latency counters on any node. A FETCH (or
 * GROUP_FETCH) at the end of the queue with wait_ms > 0 is parked and
 * answered after a flush makes new data visible (every parked fetch is
 * re-checked after each flush that applied something) or when wait_ms
 * expires (empty answer). A FETCH of many messages is read on the thread
 * pool, and the next one read ahead (fetch_job, below).
 *
 * Message properties (docs/MESSAGES.md): a PRODUCE's properties blocks are
 * checked (idx_props_check) before anything is proposed, and refused with
 * TERN_EINVAL / TERN_ETOOBIG naming the limit. A FETCH or GROUP_FETCH may
 * ask for properties and carry a tag filter: idx_fetch_filtered skips the
 * messages without a matching tag on this node, examining at most
 * [limits] fetch_scan_max messages per answer, so an answer may hold no
 * message and still advance next_offset. MESSAGE_GET (by offset, id or
 * key) is served from the local index on any node, like FETCH, and so is
 * MESSAGE_TRACE (docs/MESSAGES.md, "Query and seek"), whose groups past
 * the message are bounded as a list page (list_page_max groups, 1 MiB /
 * half of max_frame_bytes; more = 1 says some were left out).
 *
 * Delayed messages (docs/WORKQUEUES.md, "Delayed and scheduled
 * messages"): a PRODUCE_DELAYED is checked as a PRODUCE (message sizes,
 * properties, the namespace's produce rate; ACL produce) and its due time
 * against [limits] max_delay_ms by the leader's clock (the batcher's
 * timestamp op): a delay above it, or a due time further ahead, is
 * TERN_EINVAL naming the key. The batcher makes the due time absolute by
 * the entry's timestamp; the answer carries the count and that due time.
 *
 * Leadership transfer (CLUSTER_TRANSFER, admin): only the leader starts
 * one (others answer TERN_ENOTLEADER with the leader hint); the request
 * holds a connection reference until the node's transfer callback
 * answers it with the new leader, or with the error (TERN_ETRANSFER,
 * TERN_ESHUTDOWN), so an answer to a closed connection is dropped.
 *
 * Connection states: OPEN (reading, answering) -> DRAINING (a fatal frame
 * error was answered; no more reading; closed once the write queue is
 * empty) -> CLOSING (uv_close issued) -> CLOSED (handle closed). The memory
 * lives on until the last reference is gone: the handle holds one, each
 * write request in the batcher and each parked fetch holds one, so late
 * answers for a closed connection are dropped safely.
 *
 * Backpressure: reading stops on every connection while the batcher is
 * congested.
 *
 * Bounds (config [limits], node/config.c; each answers TERN_ELIMIT with a
 * message naming the key):
 *   - memory: client_memory_bytes bounds every connection's read buffer
 *     plus every answer handed to the socket and not yet written;
 *     max_conn_queued_bytes bounds one connection's unwritten answers.
 *     Both are checked before each request is served, with an estimate
 *     of its answer (FETCH: 64 KiB, and its max_bytes/max_msgs are then
 *     cut to what is left, so an answer exceeds what is left by at most
 *     one message; QUEUE_LIST: its page's byte cap; others: 4 KiB, less
 *     the request's own bytes, which are released once it is served). A
 *     request that does not fit is not served yet: the connection stops
 *     reading and processing, its buffer is kept, and it resumes when
 *     memory is released (its own answers written, or anyone's). A read
 *     buffer starts at 64 KiB when bytes arrive and is freed when empty
 *     (an idle connection holds none); it grows (doubling) towards a
 *     large frame's size as its bytes arrive, while the budget has room,
 *     otherwise the client gets TERN_ELIMIT and the connection is closed
 *     (the frame cannot be skipped without reading it). With the budget
 *     exhausted, a connection with an empty buffer waits before reading.
 *   - time: a connection with unwritten answers, or stopped on a memory
 *     bound, that makes no progress for slow_reader_timeout_ms is closed
 *     (TERN_ELIMIT sent first when it has no answers pending); a frame
 *     started and not complete after frame_timeout_ms, and a connection
 *     without a request for idle_timeout_ms with nothing parked, batched
 *     or unwritten, get TERN_ELIMIT (op PROTO_OP_ERROR, request id 0)
 *     and are closed. A sweep timer checks every connection.
 *   - connections: at most max_connections in total and
 *     max_connections_per_addr per source IPv4 address; a refused
 *     connection gets one TERN_ELIMIT error frame (PROTO_OP_ERROR,
 *     request id 0) written without blocking, then is closed. The
 *     listening socket is accepted from by hand (uv_poll) so that an
 *     accept error (EMFILE, ENFILE, ENOMEM, ...) stops accepting for
 *     100 ms instead of spinning or exiting; it is logged, rate-limited.
 *   - long polls: max_parked in total, max_parked_per_conn per
 *     connection; over either the FETCH is answered TERN_ELIMIT.
 *   - QUEUE_LIST, USER_LIST, ACL_LIST and NAMESPACE_LIST answers are
 *     paged (proto.h): list_page_max entries and 1 MiB / half of
 *     max_frame_bytes per page; an unpaged request of an older client
 *     gets every entry or TERN_ELIMIT when they do not fit in
 *     max_frame_bytes.
 *   - client TLS (client_tls, ctls.c): each session is charged
 *     NODE_CTLS_COST of client_memory_bytes (no room: the connection is
 *     refused); a handshake not done within frame_timeout_ms of the
 *     accept closes the connection; a plaintext client on a TLS port is
 *     closed without an answer (counted). See "Client TLS" below.
 *   - logins (serve_auth, docs/AUTH.md "Login bounds"): a failed
 *     AUTH_START/AUTH_CONTINUE is answered TERN_EAUTH, and the connection
 *     closed, auth_failure_delay_ms later (one server timer over a FIFO of
 *     waiting connections: every wait is equally long); meanwhile the
 *     connection neither reads nor answers, and still counts against the
 *     connection caps. Closing the server ends the waits at once. Each
 *     failure is counted for its source address (access.c); an address
 *     over auth_failures_per_minute gets TERN_ETHROTTLED for AUTH_START,
 *     at once, without running the exchange (the connection stays open).
 * Log lines for refused connections, closed connections, failed TLS
 * handshakes, failed and throttled logins are limited to one per second
 * per kind (with a count of the suppressed ones).
 *
 * The server sees the node only through what node_server_new is given
 * (server.h): the configuration, the batcher that takes write requests,
 * and struct node_server_ops (index, raft status and latency, disk
 * alarm). Answers to batched requests come back through
 * node_server_respond, the batcher's respond op.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "access.h"
#include "backup.h"
#include "ctls.h"
#include "frame.h"
#include "log.h"
#include "metrics.h"
#include "server.h"

#define SERVER__READ_CHUNK           ((size_t)64 << 10)
#define SERVER__FETCH_MIN_ANSWER     ((size_t)64 << 10)
#define SERVER__SMALL_ANSWER         ((size_t)4 << 10)
#define SERVER__LIST_PAGE_BYTES      ((size_t)1 << 20)
#define SERVER__FETCH_MSG_OVERHEAD   20u /* u64 offset, u64 ts, u32 len */
#define SERVER__FETCH_PROPS_OVERHEAD 4u  /* u32 props_len, with properties */
/* The runs layout's worst case a message (proto.h): a run of one with
 * properties, its part head (u8 kind, u64 offset, u64 ts, u32 count, u32
 * len) and u32 len, u32 props_len. */
#define SERVER__FETCH_RUNS_OVERHEAD 33u
/* An answer begun at its bound gives back the room it did not fill past
 * this much (tern_wbuf_trim). */
#define SERVER__ANSWER_SLACK      ((size_t)64 << 10)
#define SERVER__ACCEPT_BATCH      64
#define SERVER__ACCEPT_BACKOFF_MS 100
#define SERVER__LISTEN_BACKLOG    511
#define SERVER__MAX_WAIT_MS       60000u
#define SERVER__DEFAULT_MAX_MSGS  1000u
#define SERVER__MAX_MSGS          10000u
#define SERVER__DEFAULT_MAX_BYTES (1u << 20)
/* A FETCH is read on the thread pool (fetch_job) when at least this many
 * messages are there to read and asked for: a consumer catching up, not
 * one at the tail, whose few messages are answered at once. */
#define SERVER__POOL_MIN_MSGS      64u
#define SERVER__SHARED_GROUPS      4u   /* per connection */
#define SERVER__CLAIM_GROUPS       4u   /* claimed groups per connection */
#define SERVER__SHARED_DEAD        16u  /* dead letters planned per receive */
#define SERVER__RECEIVE_RECHECK_MS 200u /* a parked RECEIVE re-plans */
/* A RECEIVE answer's record around a message's data and properties: u64
 * offset, u64 timestamp, u32 len, u32 props_len, u32 delivery count; and
 * the answer's bytes before its records: the frame header, u64 queue id,
 * u32 n (proto_receive_begin). */
#define SERVER__RECEIVED_FRAMING 28u
#define SERVER__RECEIVE_PREFIX   (PROTO_HEADER_SIZE + 12u)
#define SERVER__DELIVERING_MAX   64u   /* groups with a DELIVER in flight */
#define SERVER__RELEASE_SCAN     4096u /* lease rows read at a close */
#define SERVER__HOLD_MAX         256u  /* writes held for a leader */
/* Answer bytes a corked connection holds before writing them. */
#define SERVER__CORK_MAX (256u << 10)

/* The node's own stages of a produce (PRODUCE and PRODUCE_DELAYED
 * answered with success), named in STATS after raft's (repl.h):
 *   to_propose  request decoded and added to a batch -> its entry handed
 *               to raft (the rest of the loop iteration: other requests,
 *               the batch sealed at the end of it)
 *   to_answer   its entry applied by the FSM -> its answer queued on the
 *               connection (the rest of the commit's loop iteration; the
 *               write itself leaves at the uncork right after)
 *   whole       request decoded -> its answer queued (request_to_answer):
 *               the whole stay at this node, so that what a client
 *               observes beyond it (its own library, the kernel's socket
 *               queues, the wire, the wake-ups) is measured, not derived
 * Between to_propose and to_answer lie raft's append -> commit and the
 * apply. */
enum node_stage {
    NODE_STAGE_TO_PROPOSE = 0,
    NODE_STAGE_TO_ANSWER,
    NODE_STAGE_RESIDENCE,
    NODE_STAGE__COUNT
};
static const char *const node_stage_names[NODE_STAGE__COUNT] = {
    "request_to_propose", "apply_to_answer", "request_to_answer"};

/* The node as the server sees it (node_server_new's arguments). Each
 * connection has a copy: it can outlive the server. */
struct node_view
{
    struct node_server_ops ops;
    void *arg;
    const struct node_config *cfg;
    struct node_batcher *batcher;
};

static struct idx_env *view_idx(const struct node_view *v)
{
    return v->ops.idx(v->arg);
}

static void view_status(const struct node_view *v, struct repl_status *out)
{
    v->ops.status(v->arg, out);
}

/* Member id's client address, or NULL (borrowed until the next op). */
static const char *view_client_addr(const struct node_view *v, uint64_t id)
{
    return v->ops.client_addr(v->arg, id);
}

enum conn_state {
    CONN_OPEN = 0,
    CONN_DRAINING,
    CONN_CLOSING,
    CONN_CLOSED,
};

struct node_conn
{
    uv_tcp_t tcp;
    struct tern_list link;
    struct node_server *srv; /* NULL once the server is closed */
    struct node_view view;
    enum conn_state state;
    uint8_t *rbuf;
    size_t rlen;
    size_t rcap;
    size_t rmax;
    unsigned refs;
    unsigned writes; /* uv_write requests pending */
    bool reading;
    bool in_process; /* conn_process is running (no re-entry) */
    bool paused;     /* stopped on a memory bound, frames kept */
    bool mem_wait;   /* no read buffer: the budget was exhausted */
    uint64_t id;
    uint32_t peer_ip;         /* source IPv4 address, network order */
    size_t queued;            /* answer bytes handed to the socket */
    size_t reserved;          /* bytes its fetches read on the pool may
                                 answer with (fetch_job) */
    struct fetch_job *ahead;  /* the next FETCH read ahead, or NULL */
    struct fetch_job *ahead2; /* the one after it (predicted), or NULL;
                                 only beside ahead */
    uint32_t ahead_last_n;    /* messages of the last pooled answer */
    unsigned jobs;            /* FETCHes asked, read on the pool: a
                                 draining connection answers them first */
    unsigned n_parked;        /* its parked fetches */
    uint64_t last_request_ms; /* uv_now of the last request (or accept) */
    uint64_t frame_start_ms;  /* a partial frame began (0: none) */
    uint64_t progress_ms;     /* last progress while answers are pending
                                 or the connection is paused */
    struct node_ctls *tls;    /* client_tls: the session (ctls.c), owned */
    bool xxh3; /* HELLO asked for PROTO_FEATURE_XXH3: message-carrying
                  answers go in frame version 2 */
    bool runs; /* HELLO asked for PROTO_FEATURE_RUNS: FETCH answers go in
                  the runs layout */
    struct node_principal who; /* who it authenticated as (access.c) */
    /* Answers held while the server is corked (node_server_cork), written
     * with one uv_write at the uncork; on srv->corked_conns (holding a
     * reference) while in_cork. */
    struct tern_wbuf cork;
    struct tern_list cork_link;
    bool in_cork;
    bool auth_wait; /* a failed login's answer is delayed */
    /* Shared groups it received from as consumer_id (released when it
     * closes), at most SERVER__SHARED_GROUPS. */
    uint64_t consumer_id;
    unsigned n_shared;
    struct conn_shared
    {
        char queue[TERN_NAME_MAX + 1];
        char group[TERN_NAME_MAX + 1];
        unsigned delivering; /* its DELIVERs in flight (conn_delivering) */
    } shared[4];
    /* Stream groups it claimed as consumer_id (single active consumer;
     * their claims are released when it closes), at most
     * SERVER__CLAIM_GROUPS. */
    unsigned n_claims;
    struct conn_shared claims[4];
};

/* A failed login waiting for its answer (serve_auth); holds a reference
 * to c. */
struct auth_wait
{
    struct tern_list link;
    struct node_conn *c;
    uint8_t op;
    uint64_t request_id;
    uint64_t due; /* uv_now ms */
    char message[TERN_ERRMSG_SIZE];
};

struct parked
{
    struct tern_list link;
    struct node_conn *c;
    uint8_t op;
    uint64_t request_id;
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    uint64_t offset;
    uint32_t max_msgs;
    uint32_t max_bytes;
    bool leader_only;     /* GROUP_FETCH, or FETCH with PROTO_FETCH_LEADER */
    uint64_t consumer_id; /* RECEIVE */
    uint64_t deadline;    /* uv_now ms */
    struct node_fetch_filter filter;
    bool hold; /* a write held until a leader is known (hold_write) */
    bool runs; /* FETCH: answered in the runs layout (as when it was read) */
};

/* One log line per second per kind; the rest are counted. */
struct log_limit
{
    uint64_t last_ms;
    unsigned suppressed;
};

/* A shared group with DELIVERs in flight (planned, not yet answered). The
 * leader plans from its flushed index, so a second plan before the first
 * DELIVER applies would choose the same offsets and be refused at apply:
 * while one is in flight, RECEIVEs that may wait are parked and re-planned
 * after the flush that answers it. */
struct delivering
{
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    unsigned n; /* DELIVERs in flight */
};

struct node_server
{
    struct node_view view;
    uv_loop_t *loop;
    int listen_fd;
    uv_poll_t listener;
    uv_timer_t park_timer;
    uv_timer_t sweep_timer;
    uv_timer_t accept_timer;     /* resumes accepting after an error */
    uv_timer_t auth_timer;       /* answers delayed failed logins */
    struct tern_list auth_waits; /* struct auth_wait, oldest first */
    struct tern_list conns;
    struct tern_list parked;
    unsigned n_parked;
    unsigned n_held; /* of n_parked: writes held for a leader */
    /* A walk of `parked` is running (node_server_wake, on_park_timer): an
     * answer may ask for the status, which can report a state change and
     * wake the server again from inside the walk; that nested wake only
     * sets wake_again (a nested walk would free the entry the outer one
     * holds next: seen under ASan at a SIGTERM hand-over). */
    bool walking;
    bool wake_again;
    struct delivering delivering[SERVER__DELIVERING_MAX];
    unsigned n_delivering;
    unsigned n_conns;   /* in conns (open or closing) */
    unsigned n_blocked; /* connections paused or in mem_wait */
    bool waking;        /* wake_blocked is running */
    bool corked;        /* answers are held per connection (cork below) */
    struct tern_list corked_conns; /* conns holding answers, struct node_conn */
    unsigned max_conns; /* max_connections, maybe lowered by the node */
    uint64_t mem_used;  /* read buffers + queued answers, all conns */
    struct log_limit log_refused;
    struct log_limit log_accept;
    struct log_limit log_closed;
    struct node_access *access;   /* authentication and checks, owned */
    struct auth_tls_ctx *tls_ctx; /* client_tls on: owned; NULL: plaintext */
    uint8_t *tls_in;              /* ciphertext read buffer, AUTH_TLS_BUF */
    struct log_limit log_tls;
    struct log_limit log_auth;
    struct log_limit log_throttled;
    uint64_t auth_throttled; /* AUTH_START refused for an address's failures */
    uint64_t auth_failed;    /* AUTH exchanges refused */
    uint64_t tls_failed;     /* handshakes failed (plaintext included) */
    uint64_t tls_plaintext;  /* clients that spoke without TLS */
    uint32_t max_body;
    uint64_t next_conn_id;
    unsigned open_handles; /* and fetch_jobs on the pool */
    unsigned n_fetch_jobs; /* FETCHes read on the pool (fetch_threads) */
    bool fetch_inline;     /* serve_fetch must not hand its read over */
    int starting_ahead;    /* fetch_job_start starts a read-ahead: 1 the
                              next (c->ahead), 2 the one after (ahead2) */
    bool closing;
    void (*close_cb)(void *arg);
    void *close_arg;
    struct node_metrics *metrics; /* borrowed; NULL: none */
    /* The node's part of a produce around its commit (STATS' stage
     * tail after raft's, reset with it): NODE_STAGE_*. */
    struct repl_latency stages[NODE_STAGE__COUNT];
};

struct out
{
    uv_write_t req;
    struct node_conn *c;
    uint8_t *base;
    size_t len;
};

static void conn_close(struct node_conn *c);
static void conn_drain(struct node_conn *c);
static void conn_update_reading(struct node_conn *c);
static void conn_process(struct node_conn *c);
static void wake_blocked(struct node_server *s);
static void server_handle_closed(struct node_server *s);

/* ---- Limits: memory, rate-limited logs ----------------------------------- */

static uint64_t conn_now(const struct node_conn *c)
{
    return uv_now(c->tcp.loop);
}

/* Whether to log now; *suppressed (OUT) the lines dropped since the last
 * one logged. */
static bool log_limit_ok(struct log_limit *l, uint64_t now, unsigned *dropped)
{
    if (l->last_ms != 0 && now - l->last_ms < 1000) {
        l->suppressed++;
        return false;
    }
    *dropped = l->suppressed;
    l->suppressed = 0;
    l->last_ms = now != 0 ? now : 1;
    return true;
}

static void mem_add(struct node_conn *c, size_t n)
{
    if (c->srv != NULL) {
        c->srv->mem_used += n;
    }
}

static void mem_sub(struct node_conn *c, size_t n)
{
    if (c->srv != NULL) {
        TERN_ASSERT(c->srv->mem_used >= n);
        c->srv->mem_used -= n;
    }
}

static void set_blocked(struct node_conn *c, bool *flag, bool on)
{
    if (*flag == on) {
        return;
    }
    *flag = on;
    if (c->srv != NULL) {
        if (on) {
            c->srv->n_blocked++;
        } else {
            c->srv->n_blocked--;
        }
    }
}

/* Bytes an answer of c may still take: the smaller of what is left of
 * the connection's bound and of the global budget. */
static size_t conn_left(const struct node_conn *c)
{
    const struct node_server *s = c->srv;
    const struct node_config *cfg = c->view.cfg;
    uint64_t conn_left;
    uint64_t glob_left;
    if (s == NULL) {
        return SERVER__FETCH_MIN_ANSWER;
    }
    conn_left = c->queued + c->reserved < cfg->max_conn_queued_bytes
                    ? cfg->max_conn_queued_bytes - c->queued - c->reserved
                    : 0;
    glob_left = s->mem_used < cfg->client_memory_bytes
                    ? cfg->client_memory_bytes - s->mem_used
                    : 0;
    return (size_t)TERN_MIN(conn_left, glob_left);
}

/* May c take an answer of about est bytes now? own: the bytes of the
 * request itself, released once it is served (counted against the global
 * budget only). A connection with nothing queued is held to the global
 * budget alone. */
static bool conn_admit(const struct node_conn *c, size_t est, size_t own)
{
    const struct node_server *s = c->srv;
    const struct node_config *cfg = c->view.cfg;
    size_t glob_est = est > own ? est - own : 0;
    if (s == NULL) {
        return true;
    }
    size_t held = c->queued + c->reserved;
    if (held > 0 && held + est > cfg->max_conn_queued_bytes) {
        return false;
    }
    return s->mem_used + glob_est <= cfg->client_memory_bytes;
}

/* Release the read buffer when empty, shrink it to one chunk when what is
 * left fits. */
static void rbuf_trim(struct node_conn *c)
{
    if (c->rlen == 0 && c->rbuf != NULL) {
        tern_free(c->rbuf);
        mem_sub(c, c->rcap);
        c->rbuf = NULL;
        c->rcap = 0;
    } else if (c->rcap > SERVER__READ_CHUNK && c->rlen <= SERVER__READ_CHUNK) {
        uint8_t *p = tern_realloc(c->rbuf, SERVER__READ_CHUNK);
        if (p != NULL) {
            mem_sub(c, c->rcap - SERVER__READ_CHUNK);
            c->rbuf = p;
            c->rcap = SERVER__READ_CHUNK;
        }
    }
}

/* Grow the read buffer to cap bytes, within the budget. 0, TERN_ELIMIT or
 * -ENOMEM. */
static int rbuf_grow(struct node_conn *c, size_t cap)
{
    const struct node_config *cfg = c->view.cfg;
    uint8_t *p;
    if (cap <= c->rcap) {
        return 0;
    }
    if (c->srv != NULL &&
        c->srv->mem_used + (cap - c->rcap) > cfg->client_memory_bytes) {
        return TERN_ELIMIT;
    }
    p = tern_realloc(c->rbuf, cap);
    if (p == NULL) {
        return -ENOMEM;
    }
    mem_add(c, cap - c->rcap);
    c->rbuf = p;
    c->rcap = cap;
    return 0;
}

/* ---- References and writes ---------------------------------------------- */

static void conn_unref(struct node_conn *c)
{
    TERN_ASSERT(c->refs > 0);
    if (--c->refs == 0) {
        TERN_ASSERT(c->state == CONN_CLOSED);
        node_principal_clear(&c->who);
        tern_wbuf_free(&c->cork);
        tern_free(c->rbuf);
        tern_free(c);
    }
}

static bool conn_live(const struct node_conn *c)
{
    return c->state == CONN_OPEN || c->state == CONN_DRAINING;
}

static void on_write(uv_write_t *req, int status)
{
    struct out *o = (struct out *)req;
    struct node_conn *c = o->c;
    struct node_server *s = c->srv;
    c->queued -= o->len;
    mem_sub(c, o->len);
    c->progress_ms = conn_now(c);
    tern_free(o->base);
    tern_free(o);
    c->writes--;
    if (status != 0 && conn_live(c)) {
        node_log(NODE_LOG_DEBUG, "client write failed", "conn=%llu err=%s",
                 (unsigned long long)c->id, uv_strerror(status));
        conn_close(c);
    } else if (c->state == CONN_DRAINING && c->writes == 0 && c->jobs == 0) {
        conn_close(c);
    } else if (c->state == CONN_OPEN) {
        conn_update_reading(c);
    }
    if (s != NULL && s->n_blocked > 0) {
        wake_blocked(s);
    }
    conn_unref(c);
}

/* Write len bytes at base (taken over) to the socket as they are. */
static void conn_write(struct node_conn *c, uint8_t *base, size_t len)
{
    struct out *o;
    uv_buf_t b;
    int rv;

    o = tern_malloc(sizeof(*o));
    if (o == NULL) {
        tern_free(base);
        conn_close(c);
        return;
    }
    o->c = c;
    o->base = base;
    o->len = len;
    b = uv_buf_init((char *)base, (unsigned)len);
    rv = uv_write(&o->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rv != 0) {
        tern_free(o->base);
        tern_free(o);
        conn_close(c);
        return;
    }
    c->writes++;
    c->refs++;
    if (c->queued == 0) {
        c->progress_ms = conn_now(c);
    }
    c->queued += o->len;
    mem_add(c, o->len);
}

/* Send the frame(s) in w (sealed first under client_tls); w's buffer is
 * taken over (w is reset). */
static void conn_send_now(struct node_conn *c, struct tern_wbuf *w)
{
    uint8_t *base = w->base;
    size_t len = w->len;

    if (!conn_live(c) || w->err != 0 || w->len == 0) {
        if (w->err != 0 && conn_live(c)) {
            node_log(NODE_LOG_WARN, "cannot encode answer, closing",
                     "conn=%llu err=%s", (unsigned long long)c->id,
                     tern_err_name(w->err));
            conn_close(c);
        }
        tern_wbuf_free(w);
        return;
    }
    if (c->tls != NULL &&
        node_ctls_seal(c->tls, w->base, w->len, &base, &len) != 0) {
        tern_wbuf_free(w);
        conn_close(c);
        return;
    }
    if (base != w->base) {
        tern_wbuf_free(w);
    }
    tern_wbuf_init(w);
    conn_write(c, base, len);
}

/* Write the answers c holds (cork) now; c stays on the corked list. */
static void cork_write(struct node_conn *c)
{
    struct tern_wbuf w;
    if (!c->in_cork || c->cork.len == 0) {
        return;
    }
    w = c->cork;
    tern_wbuf_init(&c->cork);
    conn_send_now(c, &w);
}

/* Send the frame(s) in w, as conn_send_now; while the server is corked
 * they are appended to the connection's held answers instead (in order),
 * which go out with one write (and under client_tls, one seal) at the
 * uncork or once SERVER__CORK_MAX bytes are held. */
static void conn_send(struct node_conn *c, struct tern_wbuf *w)
{
    struct node_server *s = c->srv;
    if (s == NULL || !s->corked || !conn_live(c) || w->err != 0 ||
        w->len == 0) {
        conn_send_now(c, w);
        return;
    }
    tern_wbuf_put(&c->cork, w->base, w->len);
    tern_wbuf_free(w);
    if (!c->in_cork) {
        c->in_cork = true;
        c->refs++;
        tern_list_push(&s->corked_conns, &c->cork_link);
    }
    if (c->cork.err != 0 || c->cork.len >= SERVER__CORK_MAX) {
        cork_write(c);
    }
}

void node_server_cork(struct node_server *s)
{
    s->corked = true;
}

void node_server_uncork(struct node_server *s)
{
    s->corked = false;
    while (!tern_list_empty(&s->corked_conns)) {
        struct node_conn *c =
            TERN_CONTAINER(s->corked_conns.next, struct node_conn, cork_link);
        tern_list_remove(&c->cork_link);
        if (conn_live(c)) {
            cork_write(c);
        }
        tern_wbuf_free(&c->cork);
        c->in_cork = false;
        conn_unref(c);
    }
}

static void send_error(struct node_conn *c,
                       uint8_t op,
                       uint64_t request_id,
                       int status,
                       const char *message);

/* The frame version of c's message-carrying answers (FETCH, GROUP_FETCH,
 * MESSAGE_GET): 2 once its client's HELLO asked for it (proto.h). */
static uint8_t answer_version(const struct node_conn *c)
{
    return c->xxh3 ? PROTO_VERSION_XXH3 : TERN_PROTO_VERSION;
}

/* HELLO: take the features of the request this server knows. */
static void serve_hello(struct node_conn *c,
                        uint64_t request_id,
                        uint32_t features)
{
    struct tern_wbuf w;
    uint32_t taken = features & (PROTO_FEATURE_XXH3 | PROTO_FEATURE_RUNS);
    tern_wbuf_init(&w);
    if (proto_encode_hello_resp(&w, request_id, taken) != 0) {
        /* Nothing taken: the client keeps what it had, so does c. */
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_HELLO, request_id, -ENOMEM, NULL);
        return;
    }
    c->xxh3 = (taken & PROTO_FEATURE_XXH3) != 0;
    c->runs = (taken & PROTO_FEATURE_RUNS) != 0;
    conn_send(c, &w);
}

static void send_error(struct node_conn *c,
                       uint8_t op,
                       uint64_t request_id,
                       int status,
                       const char *message)
{
    struct tern_wbuf w;
    uint64_t leader_id = 0;
    const char *leader_addr = "";

    if (status == -ENOSPC) {
        status = TERN_EFULL;
    }
    if (c->srv != NULL) {
        node_metrics_error(c->srv->metrics, op, status);
    }
    if (status == TERN_ENOTLEADER || status == TERN_ELEADERSHIPLOST) {
        /* A deposed leader's failed writes carry the new leader too,
         * when it is known already. */
        struct repl_status st;
        const char *a;
        view_status(&c->view, &st);
        /* A leader handing over hints the node about to lead; a leader
         * silent for an election timeout is not hinted (an election is
         * due: the client asks the others). */
        leader_id = st.transfer_to != 0 ? st.transfer_to
                    : st.leader_silent  ? 0
                                        : st.leader_id;
        a = view_client_addr(&c->view, leader_id);
        if (a != NULL) {
            leader_addr = a;
        }
    }
    tern_wbuf_init(&w);
    proto_encode_error(&w, op, request_id, status,
                       message != NULL ? message : tern_strerror(status),
                       leader_id, leader_addr);
    conn_send(c, &w);
}

/* ---- Reads ------------------------------------------------------------- */

struct fetch_ctx
{
    struct tern_wbuf *w;
    uint32_t n;
    bool props;    /* PROTO_FETCH_PROPS: the records carry properties */
    size_t budget; /* MESSAGE_GET: stop once the answer holds this much */
    bool runs;     /* a FETCH answer in the runs layout (answer_runs) */
    uint32_t n_parts;
};

static int fetch_cb(void *arg, const struct idx_fetched *m)
{
    struct fetch_ctx *x = arg;
    struct proto_fetched_msg pm = {m->offset, m->timestamp_ms, m->data,
                                   m->len,    m->props,        m->props_len};
    if (x->runs) {
        proto_put_fetch_message(x->w, &pm);
        x->n_parts++;
    } else {
        proto_put_fetched(x->w, &pm, x->props);
    }
    x->n++;
    if (x->w->err != 0) {
        return x->w->err;
    }
    return x->budget > 0 && x->w->len >= x->budget ? 1 : 0;
}

/* The runs layout: a run of a producer's batch, its bytes copied once. */
static int fetch_run_cb(void *arg, const struct idx_fetched_run *r)
{
    struct fetch_ctx *x = arg;
    proto_put_fetch_run(x->w, r->offset, r->timestamp_ms, r->count, r->props,
                        r->list, r->list_len);
    x->n += r->count;
    x->n_parts++;
    return x->w->err;
}

/* Whether c answers a FETCH-like request of op in the runs layout. */
static bool answer_runs(const struct node_conn *c, uint8_t op)
{
    return c->runs && op == PROTO_OP_FETCH;
}

/* The filter of request r (flags and raw tag records) into *f. */
static void filter_from_req(const struct proto_request *r,
                            struct node_fetch_filter *f)
{
    memset(f, 0, sizeof(*f));
    f->flags = r->flags;
    f->n_tags = r->n_tags;
    f->len = (uint16_t)TERN_MIN(r->tags_len, sizeof(f->raw));
    if (f->len > 0) {
        memcpy(f->raw, r->tags, f->len);
    }
}

/* The tags of f as idx_tag records (borrowing from f); returns how many. */
static uint32_t filter_tags(const struct node_fetch_filter *f,
                            struct idx_tag *tags)
{
    struct tern_cursor cur;
    uint32_t n = 0;
    tern_cursor_init(&cur, f->raw, f->len);
    while (n < f->n_tags && n < IDX_FETCH_TAGS_MAX && cur.err == 0 &&
           tern_cursor_left(&cur) > 0) {
        tags[n].len = tern_cursor_u8(&cur);
        tags[n].tag = (const char *)tern_cursor_bytes(&cur, tags[n].len);
        if (cur.err == 0) {
            n++;
        }
    }
    return n;
}

static void park_arm(struct node_server *s);

/* Copy the string src into dst[size]; false if it does not fit whole. */
static bool copy_whole(char *dst, size_t size, const char *src)
{
    int k = snprintf(dst, size, "%s", src);
    return k >= 0 && (size_t)k < size;
}

/* ---- Fetches read on the thread pool ------------------------------------ */

/* A FETCH of many messages is read on libuv's thread pool: an idx_reader
 * (a snapshot of the index and of the log's segment table, index/read.c)
 * is taken here on the loop thread, a pool thread reads the messages and
 * builds and checksums the whole answer frame, and the loop thread sends
 * it. The loop keeps answering meanwhile. At most fetch_threads at once;
 * the rest are read on the loop as before. The answer is the one
 * serve_fetch would have built at the start (the snapshot is taken then).
 * When the log was cut while it was read (idx_reader_end: -EAGAIN), the
 * answer is dropped and the fetch read again on the loop.
 *
 * Read-ahead: after a pooled answer that stopped on a limit with more of
 * the queue left, the same fetch at its next offset is read on the pool
 * (one per connection, c->ahead), as libtern's read-ahead asks it next;
 * it is built for the next request id. The FETCH that asks exactly that
 * (queue and queue id, offset, bounds, filter, with no cut of the log
 * since) takes it, or claims it while it is read; any other FETCH drops
 * it. Once two answers in a row held as many messages, the one after it
 * is read too, on another pool thread (c->ahead2, at the offset that
 * count predicts, for the request id after): a consumer streaming a
 * queue then has two answers read at once. It moves up when the first
 * is taken, if the first ended where it starts; otherwise it is dropped
 * (unfiltered fetches only: a wrong guess costs one read). One that
 * reached the queue end is never served (a produce acknowledged before
 * the FETCH must be in its answer), nor one that failed: those are
 * dropped when read, or read again on the loop when claimed. Its
 * end_offset is the queue's end when it was read. Bounds: a read-ahead
 * takes a pool slot only while another stays free for FETCHes asked (so
 * the two are read at once only from fetch_threads 3), and room only
 * within the connection's bound and half of the server's; one unclaimed
 * for SERVER__AHEAD_IDLE_MS, or in the way of a request that does not
 * fit, is dropped (the second with the first). A FETCH waiting on a
 * claimed one counts in c->jobs, so a draining connection answers it.
 *
 * Lifetime: a job holds a reference on the connection and counts as an
 * open handle of the server (a closing server waits for it); its room
 * (max_bytes and the per-message overhead, then the built answer's size)
 * is reserved against the connection's and the server's memory bounds
 * until it is handed to the socket or freed. */
#define SERVER__AHEAD_IDLE_MS 2000u

struct fetch_job
{
    uv_work_t work;
    struct node_server *s;
    struct node_conn *c; /* a reference */
    struct idx_reader *r;
    uint8_t op;
    uint64_t request_id; /* the one the answer is built for */
    char queue[TERN_NAME_MAX + 1];
    uint64_t offset;
    uint32_t max_msgs; /* as cut to the memory bounds */
    uint32_t max_bytes;
    uint32_t raw_max_msgs; /* as asked */
    uint32_t raw_max_bytes;
    bool leader_only;
    size_t reserved;
    uint64_t gen;                /* idx_generation at the start */
    struct node_fetch_filter ff; /* the tags borrow from ff.raw */
    struct idx_tag tags[IDX_FETCH_TAGS_MAX];
    struct idx_fetch_opts o;
    uint64_t queue_id;
    uint64_t end_offset;
    /* the pool thread's, read by the loop after it */
    struct tern_wbuf w;
    size_t start;
    size_t n_pos;
    struct fetch_ctx x;
    uint64_t next;
    int rv;
    int valid; /* idx_reader_end's */
    /* loop thread: the read-ahead's state */
    bool is_ahead;
    bool running;
    bool claimed; /* a FETCH waits for it: claim_rid */
    bool orphan;  /* dropped while running: freed when read */
    uint64_t claim_rid;
    uint64_t done_ms; /* uv_now when read */
};

static bool serve_fetch(struct node_conn *c,
                        uint8_t op,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        uint64_t offset,
                        uint32_t max_msgs,
                        uint32_t max_bytes,
                        uint32_t wait_ms,
                        bool leader_only,
                        const struct node_fetch_filter *ff,
                        bool runs);

static bool refuse_unless_writable(struct node_conn *c,
                                   uint8_t op,
                                   uint64_t request_id,
                                   const struct repl_status *st);

/* The answer frame of a FETCH up to its messages, in x's layout
 * (next_offset and the counts patched by fetch_frame_end). */
static void fetch_frame_begin(struct tern_wbuf *w,
                              const struct fetch_ctx *x,
                              uint8_t version,
                              uint8_t op,
                              uint64_t request_id,
                              uint64_t end_offset,
                              size_t *start,
                              size_t *n_pos)
{
    if (x->runs) {
        *start = proto_fetch_runs_begin(w, version, request_id, end_offset);
        *n_pos = 0;
        return;
    }
    *start = w->len;
    proto_frame_begin_v(w, version, (uint8_t)(op | PROTO_OP_RESPONSE),
                        request_id, 0);
    tern_wbuf_u64(w, 0); /* next_offset, patched below */
    tern_wbuf_u64(w, end_offset);
    *n_pos = w->len;
    tern_wbuf_u32(w, 0); /* n, patched below */
}

/* Seal the answer fetch_frame_begin began (w without error): next_offset,
 * the counts, queue_id where the layout carries it, then skip's tail
 * (GROUP_FETCH; NULL: none). */
static int fetch_frame_end(struct tern_wbuf *w,
                           const struct fetch_ctx *x,
                           size_t start,
                           size_t n_pos,
                           uint64_t next,
                           uint64_t queue_id,
                           const struct proto_group_skip *skip)
{
    if (x->runs) {
        return proto_fetch_runs_end(w, start, next, x->n, x->n_parts, queue_id);
    }
    if (x->props) {
        tern_wbuf_u64(w, queue_id);
    }
    tern_put_u64(w->base + start + PROTO_HEADER_SIZE, next);
    tern_put_u32(w->base + n_pos, x->n);
    if (skip != NULL) {
        proto_put_group_skip(w, skip);
    }
    return proto_frame_end(w, start);
}

/* The room a message takes in an answer beyond its bytes. */
static size_t fetch_msg_overhead(bool with_props, bool runs)
{
    if (runs) {
        return SERVER__FETCH_RUNS_OVERHEAD;
    }
    return SERVER__FETCH_MSG_OVERHEAD +
           (with_props ? SERVER__FETCH_PROPS_OVERHEAD : 0);
}

/* The fetch options of an answer in x's layout: a runs answer takes the
 * messages of producers' batches as runs, and counts (and carries) every
 * message's properties. */
static void fetch_opts_layout(struct idx_fetch_opts *o,
                              const struct fetch_ctx *x)
{
    if (x->runs) {
        o->run_cb = fetch_run_cb;
        o->with_props = true;
    }
}

static void fetch_job_work(uv_work_t *req)
{
    struct fetch_job *j = req->data;
    j->rv = idx_reader_fetch(j->r, &j->o, fetch_cb, &j->x, &j->next);
    if (j->rv != 0 || j->w.err != 0) {
        return;
    }
    j->rv = fetch_frame_end(&j->w, &j->x, j->start, j->n_pos, j->next,
                            j->queue_id, NULL);
    /* Begun at its bound: a read-ahead waits counted at its capacity. */
    tern_wbuf_trim(&j->w, SERVER__ANSWER_SLACK);
}

/* Keep keep of j's reserved room, return the rest: through the server
 * (the connection may be closed, c->srv NULL). wake: from a loop
 * callback, so connections waiting for memory may go on. */
static void fetch_job_release(struct fetch_job *j, size_t keep, bool wake)
{
    struct node_server *s = j->s;
    size_t n = j->reserved > keep ? j->reserved - keep : 0;
    TERN_ASSERT(s->mem_used >= n && j->c->reserved >= n);
    j->c->reserved -= n;
    s->mem_used -= n;
    j->reserved -= n;
    if (wake && n > 0 && s->n_blocked > 0 && !s->closing) {
        wake_blocked(s);
    }
}

static void fetch_ahead_drop(struct node_conn *c);

static void fetch_job_free(struct fetch_job *j, bool wake)
{
    struct node_server *s = j->s;
    struct node_conn *c = j->c;
    if (c->ahead2 == j) {
        c->ahead2 = NULL;
    }
    if (c->ahead == j) {
        c->ahead = NULL;
        fetch_ahead_drop(c); /* the one after it, alone, is of no use */
    }
    if ((!j->is_ahead || j->claimed) && --c->jobs == 0 &&
        c->state == CONN_DRAINING && c->writes == 0) {
        conn_close(c);
    }
    fetch_job_release(j, 0, wake);
    tern_wbuf_free(&j->w);
    conn_unref(j->c);
    tern_free(j);
    server_handle_closed(s);
}

/* Drop j, a read-ahead already detached from its connection: freed now,
 * or when its read ends. */
static void fetch_ahead_drop_one(struct fetch_job *j)
{
    if (j->running) {
        j->orphan = true;
    } else {
        fetch_job_free(j, false);
    }
}

/* Drop c's read-aheads. */
static void fetch_ahead_drop(struct node_conn *c)
{
    struct fetch_job *a = c->ahead, *b = c->ahead2;
    c->ahead = NULL;
    c->ahead2 = NULL;
    if (b != NULL) {
        fetch_ahead_drop_one(b);
    }
    if (a != NULL) {
        fetch_ahead_drop_one(a);
    }
}

static bool fetch_job_start(struct node_conn *c,
                            struct idx_env *e,
                            uint8_t op,
                            uint64_t request_id,
                            const char *queue,
                            uint64_t offset,
                            uint32_t max_msgs,
                            uint32_t max_bytes,
                            uint32_t raw_max_msgs,
                            uint32_t raw_max_bytes,
                            bool leader_only,
                            const struct node_fetch_filter *ff,
                            const struct idx_queue_info *qi,
                            bool runs);

/* The room a job of these bounds reserves (per_msg: fetch_msg_overhead;
 * 64 bytes for the answer's head and tail: the runs layout's 24 and its
 * u64 queue_id included). */
static size_t fetch_job_room(uint32_t max_msgs,
                             uint32_t max_bytes,
                             size_t per_msg)
{
    return (size_t)max_bytes + (size_t)max_msgs * per_msg + PROTO_HEADER_SIZE +
           64;
}

/* The room an answer from offset starts with (tern_wbuf_init_cap) when
 * the queue has a large read there (SERVER__POOL_MIN_MSGS messages up to
 * next_offset): its bound for the messages there are, so it is written
 * without the copies of growing by doubling (pages it does not fill are
 * never touched, and the room past SERVER__ANSWER_SLACK is given back once
 * it is written). 0 for a small read. */
static size_t fetch_answer_room(uint32_t max_msgs,
                                uint32_t max_bytes,
                                uint64_t offset,
                                uint64_t next_offset,
                                size_t per_msg)
{
    uint64_t avail = next_offset > offset ? next_offset - offset : 0;
    uint32_t n = (uint32_t)TERN_MIN((uint64_t)max_msgs, avail);
    if (avail < SERVER__POOL_MIN_MSGS) {
        return 0;
    }
    return fetch_job_room(n, max_bytes, per_msg);
}

/* Read j's fetch ahead at offset (request id rid) into c->ahead (slot 1)
 * or c->ahead2 (slot 2), if the pool and the memory bounds have room. */
static void fetch_ahead_one(struct fetch_job *j,
                            uint64_t offset,
                            uint64_t rid,
                            int slot)
{
    struct node_conn *c = j->c;
    struct node_server *s = j->s;
    const struct node_config *cfg = c->view.cfg;
    struct idx_env *e = view_idx(&c->view);
    struct idx_queue_info qi;
    size_t room =
        fetch_job_room(j->max_msgs, j->max_bytes,
                       fetch_msg_overhead(j->o.with_props, j->x.runs));
    if (e == NULL || s->n_fetch_jobs + 1 >= cfg->fetch_threads ||
        !conn_admit(c, room, 0) ||
        s->mem_used + room > cfg->client_memory_bytes / 2 ||
        idx_queue_get(e, j->queue, &qi) != 0 || qi.id != j->queue_id ||
        offset < qi.start_offset || offset >= qi.next_offset) {
        return;
    }
    s->starting_ahead = slot;
    (void)fetch_job_start(c, e, j->op, rid, j->queue, offset, j->max_msgs,
                          j->max_bytes, j->raw_max_msgs, j->raw_max_bytes,
                          false, &j->ff, &qi, j->x.runs);
    s->starting_ahead = 0;
}

/* After j's answer (to request rid), which stopped on a limit with more of
 * the queue left, read the same fetch at its next offset ahead, and the
 * one after it when the last two answers held as many messages. promoted:
 * c->ahead was j's second slot, moved up as j was delivered; it stays if
 * it starts where j ended. Any other read-ahead of c (another stream's,
 * maybe claimed by a FETCH) is left alone, and then nothing starts. */
static void fetch_ahead_start(struct fetch_job *j, uint64_t rid, bool promoted)
{
    struct node_conn *c = j->c;
    uint32_t prev_n = c->ahead_last_n;
    c->ahead_last_n = j->x.n;
    if (promoted &&
        (c->ahead->offset != j->next || c->ahead->queue_id != j->queue_id)) {
        fetch_ahead_drop(c); /* predicted wrong (never claimed: unserved) */
    } else if (!promoted && c->ahead != NULL) {
        return;
    }
    if (c->state != CONN_OPEN || j->leader_only || j->x.n == 0 ||
        j->next >= j->end_offset) {
        return;
    }
    if (c->ahead == NULL) {
        fetch_ahead_one(j, j->next, rid + 1, 1);
    }
    if (c->ahead != NULL && c->ahead2 == NULL && j->o.n_tags == 0 &&
        j->x.n == prev_n) {
        fetch_ahead_one(j, c->ahead->offset + j->x.n, c->ahead->request_id + 1,
                        2);
    }
}

/* Answer j's FETCH (request rid) with what it read; frees j. */
static void fetch_job_deliver(struct fetch_job *j, uint64_t rid)
{
    struct node_conn *c = j->c;
    struct node_server *s = j->s;
    bool promoted = false;
    int rv;
    if (c->ahead == j) {
        /* a close inside the sends below must not free j; the one after
         * it moves up (fetch_ahead_start checks it) */
        promoted = c->ahead2 != NULL;
        c->ahead = c->ahead2;
        c->ahead2 = NULL;
    }
    fetch_job_release(j, 0, false);
    if (j->valid != 0 || j->rv != 0 || j->w.err != 0 ||
        (j->is_ahead && j->next >= j->end_offset)) {
        /* The log changed under the read, the read failed (a data error
         * reads the same on the loop; a descriptor or memory shortage of
         * the pool's may not), or a read-ahead that is not the answer
         * now: read it here, as a FETCH asked now. */
        struct repl_status st;
        node_metrics_fetch_pool(s->metrics, NODE_METRICS_POOL_REREAD);
        if (j->leader_only) {
            view_status(&c->view, &st);
            if (refuse_unless_writable(c, j->op, rid, &st)) {
                fetch_job_free(j, false);
                return;
            }
        }
        s->fetch_inline = true;
        (void)serve_fetch(c, j->op, rid, j->queue, "", j->offset,
                          j->raw_max_msgs, j->raw_max_bytes, 0, j->leader_only,
                          &j->ff, j->x.runs);
        s->fetch_inline = false;
        fetch_job_free(j, false);
        return;
    }
    if (rid != j->request_id) {
        rv = proto_frame_set_request_id(j->w.base + j->start,
                                        j->w.len - j->start, rid);
        if (rv != 0) {
            send_error(c, j->op, rid, rv, NULL);
            fetch_job_free(j, false);
            return;
        }
    }
    if (j->is_ahead) {
        node_metrics_fetch_pool(s->metrics, NODE_METRICS_POOL_AHEAD_SERVED);
    }
    conn_send(c, &j->w);
    if (conn_live(c)) { /* a close in the send dropped the read-aheads */
        fetch_ahead_start(j, rid, promoted); /* its room beside the answer */
    }
    fetch_job_free(j, false);
}

static void fetch_job_done(uv_work_t *req, int status)
{
    struct fetch_job *j = req->data;
    struct node_conn *c = j->c;
    struct node_server *s = j->s;
    (void)status; /* UV_ECANCELED never happens: nothing cancels it */
    j->valid = idx_reader_end(j->r);
    j->r = NULL;
    j->running = false;
    s->n_fetch_jobs--;
    if (!conn_live(c) || s->closing || j->orphan) {
        fetch_job_free(j, true);
        return;
    }
    if (j->is_ahead && !j->claimed) {
        if (j->valid != 0 || j->rv != 0 || j->w.err != 0 ||
            j->next >= j->end_offset) {
            fetch_job_free(j, true); /* never served: free it now */
            return;
        }
        j->done_ms = uv_now(s->loop);
        fetch_job_release(j, j->w.cap, true); /* the answer's own size */
        return; /* waits on c->ahead for its FETCH */
    }
    fetch_job_deliver(j, j->is_ahead ? j->claim_rid : j->request_id);
    if (s->n_blocked > 0 && !s->closing) {
        wake_blocked(s);
    }
}

/* Whether c's read-ahead answers this FETCH: taken (answered or claimed)
 * or, when it does not match, dropped. */
static bool fetch_ahead_take(struct node_conn *c,
                             struct idx_env *e,
                             uint64_t request_id,
                             const char *queue,
                             uint64_t offset,
                             uint32_t max_msgs,
                             uint32_t max_bytes,
                             bool leader_only,
                             const struct node_fetch_filter *ff,
                             uint64_t queue_id,
                             bool runs)
{
    struct fetch_job *j = c->ahead;
    if (j == NULL || j->claimed) {
        return false; /* a claimed one answers its own FETCH */
    }
    if (leader_only || j->offset != offset || j->raw_max_msgs != max_msgs ||
        j->raw_max_bytes != max_bytes || j->queue_id != queue_id ||
        j->x.runs != runs || idx_generation(e) != j->gen ||
        strcmp(j->queue, queue) != 0 || memcmp(&j->ff, ff, sizeof(*ff)) != 0) {
        fetch_ahead_drop(c);
        return false;
    }
    if (j->running) {
        j->claimed = true;
        j->claim_rid = request_id;
        c->jobs++; /* a draining connection answers it first */
        return true;
    }
    fetch_job_deliver(j, request_id);
    return true;
}

/* The idle bound of c's read-ahead (conn_sweep). */
static void fetch_ahead_sweep(struct node_conn *c, uint64_t now)
{
    struct fetch_job *b = c->ahead2;
    if (b != NULL && !b->running && now - b->done_ms >= SERVER__AHEAD_IDLE_MS) {
        fetch_job_free(b, true);
    }
    struct fetch_job *j = c->ahead;
    if (j != NULL && !j->running && !j->claimed &&
        now - j->done_ms >= SERVER__AHEAD_IDLE_MS) {
        fetch_job_free(j, true); /* and the one after it */
    }
}

/* Hand the FETCH (checked, its bounds cut by serve_fetch) to the pool;
 * false when it is to be read here instead (no room on the pool, too few
 * messages to be worth the hand-off, or no reader). */
static bool fetch_job_start(struct node_conn *c,
                            struct idx_env *e,
                            uint8_t op,
                            uint64_t request_id,
                            const char *queue,
                            uint64_t offset,
                            uint32_t max_msgs,
                            uint32_t max_bytes,
                            uint32_t raw_max_msgs,
                            uint32_t raw_max_bytes,
                            bool leader_only,
                            const struct node_fetch_filter *ff,
                            const struct idx_queue_info *qi,
                            bool runs)
{
    struct node_server *s = c->srv;
    const struct node_config *cfg = c->view.cfg;
    struct fetch_job *j;
    if (s == NULL || s->closing || s->fetch_inline || op != PROTO_OP_FETCH ||
        s->n_fetch_jobs >= cfg->fetch_threads ||
        max_msgs < SERVER__POOL_MIN_MSGS ||
        qi->next_offset - offset < SERVER__POOL_MIN_MSGS ||
        strlen(queue) >= sizeof(j->queue)) {
        return false;
    }
    j = tern_calloc(1, sizeof(*j));
    if (j == NULL) {
        return false;
    }
    if (idx_reader_start(e, queue, offset, &j->r) != 0) {
        tern_free(j);
        return false;
    }
    j->work.data = j;
    j->s = s;
    j->c = c;
    j->op = op;
    j->request_id = request_id;
    (void)snprintf(j->queue, sizeof(j->queue), "%s", queue);
    j->offset = offset;
    j->max_msgs = max_msgs;
    j->max_bytes = max_bytes;
    j->raw_max_msgs = raw_max_msgs;
    j->raw_max_bytes = raw_max_bytes;
    j->leader_only = leader_only;
    j->gen = idx_generation(e);
    j->ff = *ff;
    j->queue_id = qi->id;
    j->end_offset = qi->next_offset;
    j->o.max_msgs = max_msgs;
    j->o.max_bytes = max_bytes;
    j->o.tags = j->tags;
    j->o.n_tags = filter_tags(&j->ff, j->tags);
    j->o.max_scan = cfg->fetch_scan_max;
    j->o.with_props = (ff->flags & PROTO_FETCH_PROPS) != 0;
    j->x.w = &j->w;
    j->x.props = j->o.with_props;
    j->x.runs = runs;
    fetch_opts_layout(&j->o, &j->x);
    size_t per_msg = fetch_msg_overhead(j->o.with_props, j->x.runs);
    tern_wbuf_init_cap(&j->w, fetch_answer_room(max_msgs, max_bytes, offset,
                                                qi->next_offset, per_msg));
    fetch_frame_begin(&j->w, &j->x, answer_version(c), op, request_id,
                      qi->next_offset, &j->start, &j->n_pos);
    j->next = offset;
    j->running = true;
    j->is_ahead = s->starting_ahead != 0;
    if (uv_queue_work(s->loop, &j->work, fetch_job_work, fetch_job_done) != 0) {
        (void)idx_reader_end(j->r);
        tern_wbuf_free(&j->w);
        tern_free(j);
        return false;
    }
    j->reserved = fetch_job_room(max_msgs, max_bytes, per_msg);
    c->reserved += j->reserved;
    mem_add(c, j->reserved);
    c->refs++;
    s->n_fetch_jobs++;
    s->open_handles++;
    if (s->starting_ahead == 2) {
        c->ahead2 = j;
    } else if (j->is_ahead) {
        c->ahead = j;
    } else {
        c->jobs++;
    }
    if (s->starting_ahead == 2) {
        node_metrics_fetch_pool(s->metrics, NODE_METRICS_POOL_AHEAD_NEXT);
    }
    node_metrics_fetch_pool(s->metrics, j->is_ahead ? NODE_METRICS_POOL_AHEAD
                                                    : NODE_METRICS_POOL_READ);
    return true;
}

static bool claim_refuses_fetch(struct node_conn *c,
                                uint64_t request_id,
                                const char *queue,
                                const char *group);

/* Serve a FETCH/GROUP_FETCH. With wait_ms > 0 and nothing readable it is
 * parked (returns true). leader_only: the request may only be answered by a
 * writable leader (the caller checked that now); a parked one is refused
 * instead of served if the node stops being one while it waits. runs: a
 * FETCH answered in the runs layout, as answer_runs said when it was read
 * (a parked one and one read again keep it: a later HELLO changes only
 * the FETCHes read after it). */
static bool serve_fetch(struct node_conn *c,
                        uint8_t op,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        uint64_t offset,
                        uint32_t max_msgs,
                        uint32_t max_bytes,
                        uint32_t wait_ms,
                        bool leader_only,
                        const struct node_fetch_filter *ff,
                        bool runs)
{
    static const struct node_fetch_filter no_filter;
    const struct node_view *v = &c->view;
    struct idx_env *e = view_idx(v);
    const struct node_config *cfg = v->cfg;
    struct idx_queue_info qi;
    struct tern_wbuf w;
    struct fetch_ctx x;
    uint64_t next = 0;
    size_t start;
    size_t n_pos;
    uint32_t cap_bytes;
    struct proto_group_skip skip = {0, 0};
    int rv;

    runs = runs && op == PROTO_OP_FETCH;
    if (e == NULL) {
        send_error(c, op, request_id, TERN_ESHUTDOWN, NULL);
        return false;
    }
    if (op == PROTO_OP_GROUP_FETCH &&
        claim_refuses_fetch(c, request_id, queue, group)) {
        return false;
    }
    if (op == PROTO_OP_GROUP_FETCH) {
        rv = idx_group_offset(e, queue, group, &offset);
        if (rv != 0) {
            send_error(c, op, request_id, rv, NULL);
            return false;
        }
    }
    rv = idx_queue_get(e, queue, &qi);
    if (rv != 0) {
        send_error(c, op, request_id, rv, NULL);
        return false;
    }
    if (op == PROTO_OP_GROUP_FETCH && offset < qi.start_offset) {
        /* A group behind the queue start (or new) reads from the start;
         * one that had committed reports what retention took from it. */
        skip.skipped = offset > 0 ? qi.start_offset - offset : 0;
        offset = qi.start_offset;
    }
    skip.first_offset = offset;
    if (offset < qi.start_offset) {
        char m[128];
        (void)snprintf(m, sizeof(m),
                       "offset %llu is below the queue's first offset %llu "
                       "(trimmed by retention)",
                       (unsigned long long)offset,
                       (unsigned long long)qi.start_offset);
        send_error(c, op, request_id, TERN_EOFFSET, m);
        return false;
    }
    if (offset > qi.next_offset) {
        char m[128];
        (void)snprintf(m, sizeof(m), "offset %llu is beyond the queue end %llu",
                       (unsigned long long)offset,
                       (unsigned long long)qi.next_offset);
        send_error(c, op, request_id, TERN_EOFFSET, m);
        return false;
    }
    if (offset == qi.next_offset && wait_ms > 0 && c->srv != NULL) {
        struct node_server *s = c->srv;
        char m[TERN_ERRMSG_SIZE];
        if (c->n_parked >= cfg->max_parked_per_conn) {
            (void)snprintf(m, sizeof(m),
                           "max_parked_per_conn (%u) reached: too many "
                           "long-poll fetches waiting on this connection",
                           cfg->max_parked_per_conn);
            send_error(c, op, request_id, TERN_ELIMIT, m);
            return false;
        }
        if (s->n_parked >= cfg->max_parked) {
            (void)snprintf(m, sizeof(m),
                           "max_parked (%u) reached: too many long-poll "
                           "fetches waiting on this node",
                           cfg->max_parked);
            send_error(c, op, request_id, TERN_ELIMIT, m);
            return false;
        }
        struct parked *p = tern_calloc(1, sizeof(*p));
        /* A truncated name would park a fetch of another queue or group:
         * such a request is answered now, as when out of memory. */
        if (p != NULL && (!copy_whole(p->queue, sizeof(p->queue), queue) ||
                          !copy_whole(p->group, sizeof(p->group), group))) {
            tern_free(p);
            p = NULL;
        }
        if (p != NULL) {
            p->c = c;
            p->op = op;
            p->request_id = request_id;
            p->offset = offset;
            p->max_msgs = max_msgs;
            p->max_bytes = max_bytes;
            p->leader_only = leader_only;
            p->filter = ff != NULL ? *ff : no_filter;
            p->runs = runs;
            p->deadline =
                uv_now(s->loop) + TERN_MIN(wait_ms, SERVER__MAX_WAIT_MS);
            tern_list_push(&s->parked, &p->link);
            s->n_parked++;
            c->n_parked++;
            c->refs++;
            park_arm(s);
            return true;
        }
    }
    uint32_t raw_max_msgs = max_msgs;
    uint32_t raw_max_bytes = max_bytes;
    if (op == PROTO_OP_FETCH && offset < qi.next_offset &&
        fetch_ahead_take(c, e, request_id, queue, offset, max_msgs, max_bytes,
                         leader_only, ff != NULL ? ff : &no_filter, qi.id,
                         runs)) {
        return false;
    }
    if (max_msgs == 0) {
        max_msgs = SERVER__DEFAULT_MAX_MSGS;
    }
    max_msgs = TERN_MIN(max_msgs, SERVER__MAX_MSGS);
    cap_bytes = (uint32_t)(cfg->max_frame_bytes / 2);
    if (max_bytes == 0) {
        max_bytes = SERVER__DEFAULT_MAX_BYTES;
    }
    max_bytes = TERN_MIN(max_bytes, cap_bytes);
    {
        /* Cut the answer to what the memory bounds leave: half for the
         * payload, half for the per-message overhead; at least one
         * message (which may be larger: idx_fetch always returns one). */
        size_t left = conn_left(c) / 2;
        size_t msgs = left / fetch_msg_overhead(false, runs);
        max_bytes = (uint32_t)TERN_MAX(TERN_MIN((size_t)max_bytes, left), 1);
        max_msgs = (uint32_t)TERN_MAX(TERN_MIN((size_t)max_msgs, msgs), 1);
    }

    if (ff == NULL) {
        ff = &no_filter;
    }
    if (offset < qi.next_offset &&
        fetch_job_start(c, e, op, request_id, queue, offset, max_msgs,
                        max_bytes, raw_max_msgs, raw_max_bytes, leader_only, ff,
                        &qi, runs)) {
        return false;
    }
    struct idx_tag tags[IDX_FETCH_TAGS_MAX];
    struct idx_fetch_opts o = {
        .max_msgs = max_msgs,
        .max_bytes = max_bytes,
        .tags = tags,
        .n_tags = filter_tags(ff, tags),
        .max_scan = cfg->fetch_scan_max,
        .with_props = (ff->flags & PROTO_FETCH_PROPS) != 0,
    };
    memset(&x, 0, sizeof(x));
    x.w = &w;
    x.props = o.with_props;
    x.runs = runs;
    fetch_opts_layout(&o, &x);
    tern_wbuf_init_cap(
        &w, fetch_answer_room(max_msgs, max_bytes, offset, qi.next_offset,
                              fetch_msg_overhead(o.with_props, x.runs)));
    fetch_frame_begin(&w, &x, answer_version(c), op, request_id, qi.next_offset,
                      &start, &n_pos);
    rv = 0;
    next = offset;
    if (offset < qi.next_offset) {
        rv = idx_fetch_filtered(e, queue, offset, &o, fetch_cb, &x, &next);
    }
    if (rv != 0 || w.err != 0) {
        tern_wbuf_free(&w);
        send_error(c, op, request_id, rv != 0 ? rv : w.err, NULL);
        return false;
    }
    rv = fetch_frame_end(&w, &x, start, n_pos, next, qi.id,
                         op == PROTO_OP_GROUP_FETCH &&
                                 (ff->flags & PROTO_GROUP_FETCH_SKIPPED) != 0
                             ? &skip
                             : NULL);
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, op, request_id, rv, NULL);
        return false;
    }
    tern_wbuf_trim(&w, SERVER__ANSWER_SLACK); /* queued at its length */
    conn_send(c, &w);
    return false;
}

/* MESSAGE_GET: by offset, id or key, from the local index (any node). The
 * answer stops growing once it reaches what the memory bounds leave (at
 * least one message), as a FETCH's does. */
static void serve_message_get(struct node_conn *c,
                              uint64_t request_id,
                              const struct proto_request *r,
                              const char *queue)
{
    const struct node_view *v = &c->view;
    struct idx_env *e = view_idx(v);
    struct idx_queue_info qi;
    struct tern_wbuf w;
    struct fetch_ctx x;
    size_t start, n_pos;
    int rv;
    if (e == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    rv = idx_queue_get(e, queue, &qi);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    tern_wbuf_init(&w);
    start = w.len;
    proto_frame_begin_v(&w, answer_version(c),
                        PROTO_OP_MESSAGE_GET | PROTO_OP_RESPONSE, request_id,
                        0);
    tern_wbuf_u64(&w, qi.id);
    n_pos = w.len;
    tern_wbuf_u32(&w, 0); /* n, patched below */
    memset(&x, 0, sizeof(x));
    x.w = &w;
    x.props = true;
    x.budget = TERN_MAX(
        TERN_MIN(conn_left(c) / 2, (size_t)(v->cfg->max_frame_bytes / 2)),
        (size_t)1);
    if (r->get_by == PROTO_GET_KEY) {
        rv = idx_message_get_key(e, queue, r->key, r->key_len, r->max_count,
                                 fetch_cb, &x, NULL);
    } else {
        rv = idx_message_get(e, queue,
                             r->get_by == PROTO_GET_ID ? r->queue_id : 0,
                             r->offset, fetch_cb, &x);
    }
    if (rv != 0 || w.err != 0) {
        char m[TERN_ERRMSG_SIZE];
        (void)snprintf(m, sizeof(m), "no message at offset %llu%s",
                       (unsigned long long)r->offset,
                       r->get_by == PROTO_GET_ID ? " with that id" : "");
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, rv != 0 ? rv : w.err,
                   rv == TERN_ENOTFOUND ? m : NULL);
        return;
    }
    tern_put_u32(w.base + n_pos, x.n);
    rv = proto_frame_end(&w, start);
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    conn_send(c, &w);
}

static void parked_free(struct node_server *s, struct parked *p)
{
    tern_list_remove(&p->link);
    s->n_parked--;
    p->c->n_parked--;
    if (p->hold) {
        s->n_held--;
    }
    conn_unref(p->c);
    tern_free(p);
}

/* Answer a held write (hold_write) with what the node knows now: the
 * leader hint, "no leader known" when the hold timed out, or, when this
 * node has become a writable leader, TERN_ENOTLEADER naming itself (the
 * client sends the write again, here). */
static void hold_answer(struct node_server *s, struct parked *p)
{
    struct node_conn *c = p->c;
    struct repl_status st;
    if (!conn_live(c)) {
        return;
    }
    view_status(&s->view, &st);
    if (!refuse_unless_writable(c, p->op, p->request_id, &st)) {
        send_error(c, p->op, p->request_id, TERN_ENOTLEADER,
                   "leader elected while the write waited: send it again");
    }
}

/* Does the node know where writes go: it is writable, a transfer names
 * the next leader, or another node leads and is heard from? Otherwise a
 * write is held (hold_write). */
static bool writes_have_a_home(const struct repl_status *st, uint64_t self)
{
    return st->writable || st->transfer_to != 0 ||
           (st->leader_id != 0 && st->leader_id != self && !st->leader_silent);
}

/* Is a held write ready to be answered (writes_have_a_home, or its
 * connection is gone)? */
static bool hold_ready(const struct node_server *s,
                       const struct parked *p,
                       const struct repl_status *st)
{
    return !conn_live(p->c) || writes_have_a_home(st, s->view.cfg->id);
}
static void receive_now(struct node_conn *c,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        uint64_t consumer_id,
                        uint32_t max_msgs,
                        uint32_t wait_ms);
static bool receive_due(struct node_conn *c,
                        const char *queue,
                        const char *group,
                        uint64_t consumer_id);

/* The slot of (queue, group) in s->delivering, or NULL. */
static struct delivering *delivering_find(struct node_server *s,
                                          const char *queue,
                                          const char *group)
{
    for (unsigned i = 0; s != NULL && i < s->n_delivering; i++) {
        struct delivering *d = &s->delivering[i];
        if (strcmp(d->queue, queue) == 0 && strcmp(d->group, group) == 0) {
            return d;
        }
    }
    return NULL;
}

/* A DELIVER of (queue, group) was proposed (+1) or answered (-1). A full
 * table counts nothing: plans may then collide (refused at apply, never
 * wrong). */
static void delivering_note(struct node_server *s,
                            const char *queue,
                            const char *group,
                            int delta)
{
    struct delivering *d = delivering_find(s, queue, group);
    if (d == NULL && delta > 0 && s != NULL &&
        s->n_delivering < SERVER__DELIVERING_MAX &&
        strlen(queue) < sizeof d->queue && strlen(group) < sizeof d->group) {
        d = &s->delivering[s->n_delivering++];
        (void)snprintf(d->queue, sizeof d->queue, "%s", queue);
        (void)snprintf(d->group, sizeof d->group, "%s", group);
        d->n = 0;
    }
    if (d == NULL) {
        return;
    }
    if (delta > 0) {
        d->n++;
    } else if (d->n > 0 && --d->n == 0) {
        *d = s->delivering[--s->n_delivering];
    }
}

/* A DELIVER of c for (queue, group) proposed (+1) or answered (-1): the
 * server's in-flight count (delivering_note) and c's own, which
 * on_conn_closed hands back when c goes before its answers (c->srv is gone
 * then, and a count left in the server would park the group's long polls
 * to their deadlines for good). */
static void conn_delivering(struct node_conn *c,
                            const char *queue,
                            const char *group,
                            int delta)
{
    for (unsigned i = 0; i < c->n_shared; i++) {
        struct conn_shared *g = &c->shared[i];
        if (strcmp(g->queue, queue) != 0 || strcmp(g->group, group) != 0) {
            continue;
        }
        if (delta > 0) {
            g->delivering++;
        } else if (g->delivering > 0) {
            g->delivering--;
        } else {
            return; /* handed back at the close */
        }
        delivering_note(c->srv, queue, group, delta);
        return;
    }
    /* Not a group of c's (handle_receive registers each first): counted
     * nowhere, so nothing could hand it back. */
}

/* Answer p now (new data, queue gone, expired, or, for a leader-only
 * request, the node no longer a writable leader: then TERN_ENOTLEADER). */
static void parked_answer(struct node_server *s, struct parked *p)
{
    struct node_conn *c = p->c;
    struct repl_status st;
    if (p->hold) {
        hold_answer(s, p);
        parked_free(s, p);
        return;
    }
    if (p->op == PROTO_OP_RECEIVE) {
        uint64_t now = uv_now(s->loop);
        if (conn_live(c)) {
            /* The rest of its wait: parked again while another DELIVER of
             * its group is in flight. */
            receive_now(c, p->request_id, p->queue, p->group, p->consumer_id,
                        p->max_msgs,
                        p->deadline > now ? (uint32_t)(p->deadline - now) : 0);
        }
        parked_free(s, p);
        return;
    }
    if (conn_live(c)) {
        view_status(&s->view, &st);
        if (!p->leader_only ||
            !refuse_unless_writable(c, p->op, p->request_id, &st)) {
            serve_fetch(c, p->op, p->request_id, p->queue, p->group, p->offset,
                        p->max_msgs, p->max_bytes, 0, false, &p->filter,
                        p->runs);
        }
    }
    parked_free(s, p);
}

/* Has p something to read (or an error to report)? writable: the node's
 * status, read once per wake by the caller. */
static bool parked_ready(struct node_server *s, struct parked *p, bool writable)
{
    struct idx_env *e = view_idx(&s->view);
    struct idx_queue_info qi;
    uint64_t offset = p->offset;
    if (!conn_live(p->c) || e == NULL) {
        return true;
    }
    if (p->leader_only && !writable) {
        return true;
    }
    if (p->op == PROTO_OP_RECEIVE) {
        return receive_due(p->c, p->queue, p->group, p->consumer_id);
    }
    if (p->op == PROTO_OP_GROUP_FETCH &&
        idx_group_offset(e, p->queue, p->group, &offset) != 0) {
        return true;
    }
    if (idx_queue_get(e, p->queue, &qi) != 0) {
        return true;
    }
    return offset != qi.next_offset;
}

static bool wake_walk(struct node_server *s);

static void on_park_timer(uv_timer_t *t)
{
    struct node_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    struct tern_list *l = s->parked.next;
    struct repl_status st;
    if (s->walking) {
        return; /* re-armed by the walk running */
    }
    view_status(&s->view, &st);
    s->walking = true;
    s->wake_again = false;
    while (l != &s->parked) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        l = l->next;
        if (p->deadline <= now || !conn_live(p->c) ||
            (p->op == PROTO_OP_RECEIVE && parked_ready(s, p, true)) ||
            (p->hold && hold_ready(s, p, &st))) {
            parked_answer(s, p); /* the last: a silent leader heard again */
        }
    }
    while (s->wake_again) {
        s->wake_again = false;
        (void)wake_walk(s);
    }
    s->walking = false;
    park_arm(s);
}

static void park_arm(struct node_server *s)
{
    uint64_t now = uv_now(s->loop);
    uint64_t min = UINT64_MAX;
    struct tern_list *l;
    if (s->closing) {
        return;
    }
    for (l = s->parked.next; l != &s->parked; l = l->next) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        min = TERN_MIN(min, p->deadline);
        if (p->op == PROTO_OP_RECEIVE) {
            /* Leases expire without a flush: look again now and then. */
            min = TERN_MIN(min, now + SERVER__RECEIVE_RECHECK_MS);
        } else if (p->hold) {
            /* A silent leader heard again changes no leader nor role, so
             * nothing wakes the hold: look again every heartbeat. */
            min = TERN_MIN(min, now + TERN_MAX(1u, s->view.cfg->heartbeat_ms));
        }
    }
    if (min == UINT64_MAX) {
        uv_timer_stop(&s->park_timer);
        return;
    }
    uv_timer_start(&s->park_timer, on_park_timer, min > now ? min - now : 0, 0);
}

/* One pass over the parked requests with the status as it is now:
 * answer those ready. Returns whether any was answered. s->walking is set
 * by the caller. */
static bool wake_walk(struct node_server *s)
{
    struct tern_list *l = s->parked.next;
    struct repl_status st;
    bool any = false;
    view_status(&s->view, &st);
    while (l != &s->parked) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        l = l->next;
        if (p->hold ? hold_ready(s, p, &st) : parked_ready(s, p, st.writable)) {
            parked_answer(s, p);
            any = true;
        }
    }
    return any;
}

void node_server_wake(struct node_server *s)
{
    bool any = false;
    if (s->n_parked == 0) {
        return; /* the common case, after every flush */
    }
    if (s->walking) {
        s->wake_again = true; /* the running walk passes again */
        return;
    }
    s->walking = true;
    do {
        s->wake_again = false;
        any |= wake_walk(s);
    } while (s->wake_again);
    s->walking = false;
    if (any) {
        park_arm(s);
    }
}

struct list_ctx
{
    struct node_access_list *access; /* which names the client sees */
    struct tern_wbuf *w;
    size_t body_start; /* w->len at the start of the body */
    uint32_t n;
    uint32_t max_n;   /* queues per answer */
    size_t max_bytes; /* body bytes per answer */
    bool more;        /* stopped before a queue that did not fit */
};

static int list_cb(void *arg, const struct idx_queue_info *q)
{
    struct list_ctx *x = arg;
    const char *name = q->name;
    int show = node_access_list_show(x->access, q->name, &name);
    size_t name_len, entry;
    if (show <= 0) {
        return show < 0 ? 1 : 0; /* past the namespace: the last page */
    }
    name_len = strlen(name);
    entry = 2 + name_len + 16;
    if (x->n >= x->max_n ||
        (x->n > 0 && x->w->len - x->body_start + entry + 1 > x->max_bytes)) {
        x->more = true;
        return 1;
    }
    proto_put_str(x->w, name, name_len);
    tern_wbuf_u64(x->w, q->start_offset);
    tern_wbuf_u64(x->w, q->next_offset);
    x->n++;
    return x->w->err;
}

/* The bytes of a QUEUE_LIST answer: a page, or (unpaged) all of them. */
static size_t list_answer_cap(const struct node_config *cfg, bool paged)
{
    if (!paged) {
        return (size_t)cfg->max_frame_bytes;
    }
    return TERN_MIN(SERVER__LIST_PAGE_BYTES,
                    (size_t)(cfg->max_frame_bytes / 2));
}

/* MESSAGE_TRACE: the message's trace from the local index (any node), with
 * the groups past it: at most list_page_max of them and what fits in a
 * list page (then more = 1). */
struct trace_ctx
{
    struct tern_wbuf *w;
    const struct idx_trace *t;
    uint64_t request_id;
    size_t start; /* frame start, once begun */
    bool begun;
    uint32_t n;
    uint32_t max_n;
    size_t max_bytes;
    bool more;
};

static void trace_begin(struct trace_ctx *x)
{
    const struct idx_trace *t = x->t;
    struct proto_trace pt = {
        .queue_id = t->queue_id,
        .offset = t->offset,
        .append_ms = t->append_ms,
        .producer_id = t->producer_id,
        .seq = t->seq,
        .batch_pos = t->batch_pos,
        .batch_count = t->batch_count,
        .len = t->len,
        .raft_index = t->raft_index,
        .term = t->term,
        .key = t->key,
        .key_len = t->key_len,
        .tag = t->tag,
        .tag_len = t->tag_len,
    };
    x->start = proto_trace_begin(x->w, x->request_id, &pt);
    x->begun = true;
}

static int trace_group_cb(void *arg, const struct idx_trace_group *g)
{
    struct trace_ctx *x = arg;
    size_t n = strlen(g->name);
    struct proto_trace_group pg = {g->name, (uint16_t)n, g->next_offset,
                                   g->commit_ms, g->commit_index};
    if (!x->begun) {
        trace_begin(x); /* *x->t is filled before the first group */
    }
    if (x->n >= x->max_n ||
        x->w->len + proto_trace_group_size(n) > x->max_bytes) {
        x->more = true;
        return 1;
    }
    proto_put_trace_group(x->w, &pg);
    x->n++;
    return 0;
}

/* The delivery tail of a trace (PROTO_TRACE_DELIVERIES): the message's
 * state in each shared group of the queue, as many as fit with the
 * groups in the trace's bounds (then dmore = 1). */
struct deliveries_ctx
{
    struct proto_delivery *d;
    char (*names)[TERN_NAME_MAX + 1];
    uint32_t n;
    uint32_t max_n;
    size_t bytes;
    size_t max_bytes;
    bool more;
};

static int delivery_cb(void *arg, const struct idx_delivery *d)
{
    struct deliveries_ctx *x = arg;
    size_t len = strlen(d->group);
    if (x->n >= x->max_n ||
        x->bytes + proto_delivery_size(len) > x->max_bytes) {
        x->more = true;
        return 1;
    }
    memcpy(x->names[x->n], d->group, len + 1);
    x->d[x->n] = (struct proto_delivery){
        x->names[x->n], (uint16_t)len,  (uint8_t)d->state,
        d->count,       d->consumer_id, d->deadline_ms,
    };
    x->bytes += proto_delivery_size(len);
    x->n++;
    return 0;
}

static int trace_deliveries_end(struct idx_env *e,
                                const char *queue,
                                uint64_t offset,
                                struct trace_ctx *t)
{
    struct deliveries_ctx x;
    uint32_t cap = TERN_MIN(t->max_n, 1000u);
    int rv;
    memset(&x, 0, sizeof(x));
    x.max_n = TERN_MAX(cap, 1u);
    x.max_bytes = t->max_bytes > t->w->len ? t->max_bytes - t->w->len : 0;
    x.d = calloc(x.max_n, sizeof(*x.d));
    x.names = calloc(x.max_n, sizeof(*x.names));
    if (x.d == NULL || x.names == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    rv = idx_message_deliveries(e, queue, offset, delivery_cb, &x);
    if (rv == 0) {
        rv = proto_trace_end_deliveries(t->w, t->start, t->n, t->more, x.d, x.n,
                                        x.more);
    }
out:
    free(x.d);
    free(x.names);
    return rv;
}

static void serve_message_trace(struct node_conn *c,
                                uint64_t request_id,
                                const struct proto_request *r,
                                const char *queue)
{
    const struct node_view *v = &c->view;
    struct idx_env *e = view_idx(v);
    struct idx_trace t;
    struct tern_wbuf w;
    struct trace_ctx x;
    int rv;
    if (e == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    tern_wbuf_init(&w);
    memset(&x, 0, sizeof(x));
    x.w = &w;
    x.t = &t;
    x.request_id = request_id;
    x.max_n = v->cfg->list_page_max;
    x.max_bytes = list_answer_cap(v->cfg, true);
    rv = idx_message_trace(e, queue, r->offset, &t, trace_group_cb, &x);
    if (rv == 0 && !x.begun) {
        trace_begin(&x);
    }
    if (rv == 0 && (r->flags & PROTO_TRACE_DELIVERIES) != 0) {
        rv = trace_deliveries_end(e, queue, r->offset, &x);
    } else if (rv == 0) {
        rv = proto_trace_end(&w, x.start, x.n, x.more);
    }
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, rv,
                   rv == TERN_EOFFSET ? idx_errmsg(e) : NULL);
        return;
    }
    conn_send(c, &w);
}

/* GROUP_STATUS (docs/WORKQUEUES.md, "Group status"): one group, or a page
 * of the queue's groups after r->after, from the local index (any node;
 * it may lag the leader by replication), by the leader clock of
 * leader_time. At most list_page_max groups (and r->max_count), what fits
 * in a list page, and [limits] status_max_rows lease rows per group and
 * per page. */
static uint64_t leader_time(const struct node_conn *c);
static void name_copy(char *dst, const char *src, uint16_t len);

struct gstatus_ctx
{
    struct tern_wbuf *w;
    uint32_t n;
    uint32_t max_n;
    size_t max_bytes;
    bool more;
};

static int gstatus_cb(void *arg, const struct idx_group_status *s)
{
    struct gstatus_ctx *x = arg;
    struct proto_status_consumer cons[IDX_STATUS_CONSUMERS_MAX];
    /* The DLQ as the client names it: without the namespace. */
    const char *dlq = strchr(s->dlq, '%');
    dlq = dlq != NULL ? dlq + 1 : s->dlq;
    struct proto_group_status g = {
        .group = s->name,
        .group_len = (uint16_t)strlen(s->name),
        .shared = s->shared ? 1 : 0,
        .start = s->start,
        .end = s->end,
        .committed = s->committed,
        .next = s->next,
        .lag = s->lag,
        .commit_ms = s->commit_ms,
        .ack_timeout_ms = s->shared ? s->settings.ack_timeout_ms : 0,
        .max_deliveries = s->shared ? s->settings.max_deliveries : 0,
        .window = s->shared ? s->settings.window : 0,
        .dlq = dlq,
        .dlq_len = (uint16_t)strlen(dlq),
        .dlq_depth = s->dlq_depth,
        .in_flight = s->in_flight,
        .ready = s->ready,
        .oldest_deadline_ms = s->oldest_deadline_ms,
        .partial = s->partial ? 1 : 0,
        .others_held = s->others_held,
        .n_consumers = (uint16_t)s->n_consumers,
        .consumers = cons,
        .claim_holder = s->claim_holder,
        .claim_until_ms = s->claim_until_ms,
    };
    for (uint32_t i = 0; i < s->n_consumers; i++) {
        cons[i].id = s->consumers[i].id;
        cons[i].held = s->consumers[i].held;
    }
    if (x->n > 0 && x->w->len + proto_group_status_size(&g) > x->max_bytes) {
        x->more = true;
        return 1;
    }
    proto_put_group_status(x->w, &g);
    x->n++;
    return 0;
}

static void serve_group_status(struct node_conn *c,
                               uint64_t request_id,
                               const struct proto_request *r,
                               const char *queue)
{
    const struct node_config *cfg = c->view.cfg;
    struct idx_env *e = view_idx(&c->view);
    char group[TERN_NAME_MAX + 1], after[TERN_NAME_MAX + 1];
    struct tern_wbuf w;
    struct gstatus_ctx x;
    bool more = false;
    size_t start;
    int rv;
    if (e == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    name_copy(group, r->group, r->group_len);
    name_copy(after, r->after, r->after_len);
    memset(&x, 0, sizeof(x));
    tern_wbuf_init(&w);
    x.w = &w;
    x.max_n = cfg->list_page_max;
    if (r->max_count > 0) {
        x.max_n = TERN_MIN(x.max_n, r->max_count);
    }
    x.max_bytes = list_answer_cap(cfg, true);
    start = proto_group_status_begin(&w, request_id);
    if (group[0] != '\0') {
        struct idx_group_status s;
        rv = idx_group_status(e, queue, group, leader_time(c),
                              cfg->status_max_rows, &s);
        if (rv == 0) {
            (void)gstatus_cb(&x, &s);
        }
    } else {
        rv = idx_group_status_list(e, queue, after, x.max_n, leader_time(c),
                                   cfg->status_max_rows, cfg->status_max_rows,
                                   gstatus_cb, &x, &more);
    }
    if (rv == 0) {
        rv = proto_group_status_end(&w, start, x.n, more || x.more);
    }
    if (rv != 0) {
        char m[TERN_ERRMSG_SIZE];
        tern_wbuf_free(&w);
        tern_errmsg_printf(m, "no group %s on this queue", group);
        send_error(c, r->op, request_id, rv, rv == TERN_ENOTFOUND ? m : NULL);
        return;
    }
    conn_send(c, &w);
}

/* QUEUE_LIST: a page of the queues after r->after (paged), or every queue
 * for an older client's empty request (TERN_ELIMIT when they do not fit in
 * one frame). */
static void serve_list(struct node_conn *c,
                       uint64_t request_id,
                       const struct proto_request *r)
{
    const struct node_config *cfg = c->view.cfg;
    struct idx_env *e = view_idx(&c->view);
    char after[TERN_NAME_MAX + 2];
    struct node_access_list *acc = NULL;
    struct tern_wbuf w;
    struct list_ctx x;
    size_t n_pos;
    int rv;

    if (e == NULL || c->srv == NULL) {
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    /* The stored name to start after, and the filter of what is shown. */
    rv = node_access_list_begin(c->srv->access, &c->who, e, r->after,
                                r->after_len, after, &acc);
    if (rv != 0) {
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, rv, NULL);
        return;
    }
    memset(&x, 0, sizeof(x));
    x.max_n = UINT32_MAX;
    x.max_bytes = list_answer_cap(cfg, r->paged != 0);
    if (r->paged) {
        x.max_n = cfg->list_page_max;
        if (r->max_count > 0) {
            x.max_n = TERN_MIN(x.max_n, r->max_count);
        }
    }
    x.access = acc;
    tern_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OP_QUEUE_LIST | PROTO_OP_RESPONSE, request_id,
                      0);
    n_pos = w.len;
    x.body_start = w.len;
    tern_wbuf_u32(&w, 0);
    x.w = &w;
    rv = idx_queue_list_after(e, after, list_cb, &x);
    node_access_list_end(acc);
    if (rv == 0 && w.err == 0 && x.more && !r->paged) {
        char m[TERN_ERRMSG_SIZE];
        tern_wbuf_free(&w);
        (void)snprintf(m, sizeof(m),
                       "queue list does not fit in max_frame_bytes (%llu); "
                       "list it in pages (a newer client)",
                       (unsigned long long)cfg->max_frame_bytes);
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, TERN_ELIMIT, m);
        return;
    }
    if (rv == 0 && w.err == 0) {
        tern_put_u32(w.base + n_pos, x.n);
        if (r->paged) {
            tern_wbuf_u8(&w, x.more ? 1 : 0);
        }
        rv = proto_frame_end(&w, 0);
    }
    if (rv != 0 || w.err != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, rv != 0 ? rv : w.err,
                   NULL);
        return;
    }
    conn_send(c, &w);
}

/* The members STATUS lists: the raft configuration the node knows (with
 * each member's client address: kept with it, else its [peers] line, else
 * ""), or the [peers] lines while the node has no configuration (a node
 * waiting to join). cm (scratch) holds the configuration's strings;
 * roles[i] is members[i]'s role. Returns the count. */
static unsigned status_members(struct node_conn *c,
                               struct proto_member *members,
                               uint8_t *roles,
                               struct repl_member *cm,
                               unsigned cap)
{
    const struct node_config *cfg = c->view.cfg;
    unsigned n = 0;
    c->view.ops.members(c->view.arg, cm, cap, &n);
    n = TERN_MIN(n, cap);
    for (unsigned i = 0; i < n; i++) {
        const struct node_peer *p = node_config_peer(cfg, cm[i].id);
        const char *ca = cm[i].meta[0] != '\0' ? cm[i].meta
                         : p != NULL           ? p->client_addr
                                               : "";
        members[i].id = cm[i].id;
        members[i].raft_address = cm[i].address;
        members[i].raft_address_len = (uint16_t)strlen(cm[i].address);
        members[i].client_address = ca;
        members[i].client_address_len = (uint16_t)strlen(ca);
        roles[i] = (uint8_t)cm[i].role;
    }
    if (n > 0) {
        return n;
    }
    n = TERN_MIN(cfg->n_peers, cap);
    for (unsigned i = 0; i < n; i++) {
        members[i].id = cfg->peers[i].id;
        members[i].raft_address = cfg->peers[i].raft_addr;
        members[i].raft_address_len = (uint16_t)strlen(cfg->peers[i].raft_addr);
        members[i].client_address = cfg->peers[i].client_addr;
        members[i].client_address_len =
            (uint16_t)strlen(cfg->peers[i].client_addr);
        roles[i] = PROTO_MEMBER_ABSENT; /* not in a configuration known */
    }
    return n;
}

static void serve_status(struct node_conn *c,
                         uint64_t request_id,
                         uint8_t flags)
{
    const struct node_config *cfg = c->view.cfg;
    struct proto_member members[REPL_MEMBERS_MAX];
    uint8_t roles[REPL_MEMBERS_MAX];
    struct repl_member *cm;
    struct proto_status ps;
    struct repl_status st;
    const char *la;
    struct tern_wbuf w;
    char version[32];
    unsigned nm;
    int rv;

    cm = tern_calloc(REPL_MEMBERS_MAX, sizeof(*cm));
    if (cm == NULL) {
        send_error(c, PROTO_OP_STATUS, request_id, -ENOMEM, NULL);
        return;
    }
    view_status(&c->view, &st);
    nm = status_members(c, members, roles, cm, REPL_MEMBERS_MAX);
    la = view_client_addr(&c->view, st.leader_id);
    memset(&ps, 0, sizeof(ps));
    ps.node_id = cfg->id;
    ps.role = (uint8_t)st.role;
    ps.leader_id = st.leader_id;
    ps.leader_address = la != NULL ? la : "";
    ps.leader_address_len = (uint16_t)strlen(ps.leader_address);
    ps.term = st.term;
    ps.commit_index = st.commit_index;
    ps.last_applied = st.last_applied;
    ps.writable = st.writable ? 1 : 0;
    ps.transport = cfg->transport;
    ps.transport_len = (uint16_t)strlen(cfg->transport);
    ps.durability = repl_durability_name(st.durability);
    ps.durability_len = (uint16_t)strlen(ps.durability);
    ps.n_members = nm;
    ps.members = members;
    if ((flags & PROTO_STATUS_TIMERS) != 0 && view_idx(&c->view) != NULL &&
        idx_timer_stats(view_idx(&c->view), &ps.timers_pending,
                        &ps.timers_oldest_due_ms) == 0) {
        ps.has_timers = 1;
        ps.has_membership = 1;
        ps.self_role = (uint8_t)st.member_role;
        ps.member_roles = roles;
        /* The tail carries this ternd's version too (tail version 2). */
        (void)snprintf(version, sizeof(version), "%d.%d.%d", TERN_VERSION_MAJOR,
                       TERN_VERSION_MINOR, TERN_VERSION_PATCH);
        ps.server_version = version;
        ps.server_version_len = (uint16_t)strlen(version);
    }
    tern_wbuf_init(&w);
    rv = proto_encode_status_resp(&w, request_id, &ps);
    tern_free(cm);
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_STATUS, request_id, TERN_EINTERNAL,
                   "cannot encode status");
        return;
    }
    conn_send(c, &w);
}

/* ---- Answers from a completion callback ---------------------------------- */

/* A request answered when an operation started by its handler completes
 * (membership change, leadership transfer, backup). The handler takes a
 * reference on c (c->refs++) once the operation started, so its callback
 * runs on a valid connection and answers only if it is still open
 * (conn_live); conn_wait_end drops the reference. */
struct conn_wait
{
    struct node_conn *c;
    uint64_t request_id;
};

/* Allocate size bytes (zeroed; a struct that starts with a struct
 * conn_wait) for request_id on c. NULL after answering op with -ENOMEM. */
static void *conn_wait_new(struct node_conn *c,
                           uint8_t op,
                           uint64_t request_id,
                           size_t size)
{
    struct conn_wait *w = tern_calloc(1, size);
    if (w == NULL) {
        send_error(c, op, request_id, -ENOMEM, NULL);
        return NULL;
    }
    w->c = c;
    w->request_id = request_id;
    return w;
}

/* The callback is done with w: drop its reference on the connection and
 * free w (from conn_wait_new). */
static void conn_wait_end(struct conn_wait *w)
{
    conn_unref(w->c);
    tern_free(w);
}

/* ---- MEMBER (op 34) ------------------------------------------------------ */

struct member_req
{
    struct conn_wait wait; /* first: a reference until the answer */
    uint8_t action;
    uint64_t id;
};

static void member_done(void *data, int status, int reached)
{
    struct member_req *m = data;
    struct node_conn *c = m->wait.c;
    const char *what = m->action == PROTO_MEMBER_ADD ? "add" : "remove";
    node_log(
        status == 0 ? NODE_LOG_INFO : NODE_LOG_WARN,
        status == 0 ? "membership change done" : "membership change failed",
        "action=%s id=%llu role=%s err=%s", what, (unsigned long long)m->id,
        repl_member_role_name(reached),
        status == 0 ? "-" : tern_err_name(status));
    if (conn_live(c)) {
        if (status == 0) {
            struct tern_wbuf w;
            tern_wbuf_init(&w);
            (void)proto_encode_member_resp(&w, m->wait.request_id,
                                           (uint8_t)reached);
            conn_send(c, &w);
        } else {
            char msg[TERN_ERRMSG_SIZE];
            (void)snprintf(msg, sizeof(msg),
                           "%s of node %llu: %s; its role now: %s", what,
                           (unsigned long long)m->id, tern_strerror(status),
                           repl_member_role_name(reached));
            send_error(c, PROTO_OP_MEMBER, m->wait.request_id, status, msg);
        }
    }
    conn_wait_end(&m->wait);
}

static void handle_member(struct node_conn *c,
                          uint64_t request_id,
                          const struct proto_request *r)
{
    char raft[PROTO_MEMBER_ADDR_MAX + 1];
    char client[PROTO_MEMBER_ADDR_MAX + 1];
    char msg[TERN_ERRMSG_SIZE];
    struct member_req *m;
    int rv;

    (void)snprintf(raft, sizeof(raft), "%.*s", (int)r->raft_address_len,
                   r->raft_address);
    (void)snprintf(client, sizeof(client), "%.*s", (int)r->client_address_len,
                   r->client_address);
    m = conn_wait_new(c, r->op, request_id, sizeof(*m));
    if (m == NULL) {
        return;
    }
    m->action = r->flags;
    m->id = r->member_id;
    rv = c->view.ops.member_change(c->view.arg, r->flags, r->member_id, raft,
                                   client, r->wait_ms, member_done, m);
    if (rv != 0) {
        tern_free(m);
        switch (rv) {
        case TERN_ECHANGING:
            (void)snprintf(msg, sizeof(msg),
                           "another membership change is in progress "
                           "(uncommitted configuration or a member "
                           "catching up); retry once it is done");
            break;
        case TERN_ELASTVOTER:
            (void)snprintf(msg, sizeof(msg),
                           "node %llu is the only voter; add another "
                           "first",
                           (unsigned long long)r->member_id);
            break;
        case TERN_ENOTMEMBER:
            (void)snprintf(msg, sizeof(msg),
                           "node %llu is not in the cluster configuration",
                           (unsigned long long)r->member_id);
            break;
        case TERN_EINVAL:
            (void)snprintf(msg, sizeof(msg),
                           "node %llu: already a voter, or the id or raft "
                           "address of another member",
                           (unsigned long long)r->member_id);
            break;
        default:
            send_error(c, r->op, request_id, rv, NULL);
            return;
        }
        send_error(c, r->op, request_id, rv, msg);
        return;
    }
    c->refs++;
}

/* STATS: this node's replication latency summary (leader append ->
 * commit), then a reset of the counters when the request asks for it.
 * Answered by any node: a follower has nothing sampled (count 0). */
static void serve_stats(struct node_conn *c, uint64_t request_id, uint8_t flags)
{
    const struct node_config *cfg = c->view.cfg;
    struct repl_latency *lat;
    struct repl_status st;
    struct proto_stats ps;
    struct tern_wbuf w;

    /* ~8 KiB of histogram: keep it off the loop's stack. */
    lat = tern_malloc(sizeof(*lat));
    if (lat == NULL) {
        send_error(c, PROTO_OP_STATS, request_id, -ENOMEM, NULL);
        return;
    }
    view_status(&c->view, &st);
    memset(&ps, 0, sizeof(ps));
    if ((flags & PROTO_STATS_STAGES) != 0) {
        /* Before the latency op: its reset clears the stages too. */
        struct repl_latency *sg = tern_calloc(REPL_STAGE__COUNT, sizeof(*sg));
        if (sg == NULL) {
            tern_free(lat);
            send_error(c, PROTO_OP_STATS, request_id, -ENOMEM, NULL);
            return;
        }
        ps.has_stages = 1;
        if (c->view.ops.stages != NULL) {
            c->view.ops.stages(c->view.arg, sg);
            for (unsigned i = 0;
                 i < REPL_STAGE__COUNT && i < PROTO_STATS_MAX_STAGES; i++) {
                struct proto_stats_stage *p = &ps.stages[ps.n_stages++];
                p->name = repl_stage_name(i);
                p->name_len = (uint16_t)strlen(p->name);
                p->count = sg[i].count;
                p->p50_ns = repl_latency_quantile(&sg[i], 0.50);
                p->p99_ns = repl_latency_quantile(&sg[i], 0.99);
            }
        }
        for (unsigned i = 0; c->srv != NULL && i < NODE_STAGE__COUNT &&
                             ps.n_stages < PROTO_STATS_MAX_STAGES;
             i++) {
            const struct repl_latency *l = &c->srv->stages[i];
            struct proto_stats_stage *p = &ps.stages[ps.n_stages++];
            p->name = node_stage_names[i];
            p->name_len = (uint16_t)strlen(p->name);
            p->count = l->count;
            p->p50_ns = repl_latency_quantile(l, 0.50);
            p->p99_ns = repl_latency_quantile(l, 0.99);
        }
        tern_free(sg);
    }
    if ((flags & PROTO_STATS_RESET) != 0 && c->srv != NULL) {
        memset(c->srv->stages, 0, sizeof(c->srv->stages));
    }
    c->view.ops.latency(c->view.arg, lat, (flags & PROTO_STATS_RESET) != 0);
    ps.node_id = cfg->id;
    ps.role = (uint8_t)st.role;
    ps.transport = cfg->transport;
    ps.transport_len = (uint16_t)strlen(cfg->transport);
    ps.durability = repl_durability_name(st.durability);
    ps.durability_len = (uint16_t)strlen(ps.durability);
    ps.count = lat->count;
    ps.dropped = lat->dropped;
    ps.sum_ns = lat->sum_ns;
    ps.min_ns = lat->min_ns;
    ps.p50_ns = repl_latency_quantile(lat, 0.50);
    ps.p90_ns = repl_latency_quantile(lat, 0.90);
    ps.p99_ns = repl_latency_quantile(lat, 0.99);
    ps.p999_ns = repl_latency_quantile(lat, 0.999);
    ps.max_ns = lat->max_ns;
    tern_free(lat);
    tern_wbuf_init(&w);
    if (proto_encode_stats_resp(&w, request_id, &ps) != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_STATS, request_id, TERN_EINTERNAL,
                   "cannot encode stats");
        return;
    }
    conn_send(c, &w);
}

/* A name of the request (len bytes, borrowed) as a C string in dst
 * (PROTO_MAX_NAME + 1 bytes, caller-owned). */
static void name_copy(char *dst, const char *src, uint16_t len)
{
    if (src == NULL) {
        len = 0;
    }
    if (len > PROTO_MAX_NAME) {
        len = PROTO_MAX_NAME;
    }
    if (len > 0) {
        memcpy(dst, src, len);
    }
    dst[len] = '\0';
}

/* ---- Security metadata lists (docs/AUTH.md) ---------------------------- */

/* One list answer being built from an index walk: at most max_n entries
 * in max_bytes of body (at least one entry); more is set when the walk
 * stopped before an entry that did not fit. */
struct sec_list_ctx
{
    struct tern_wbuf *w;
    size_t body_start; /* w->len at the start of the body */
    size_t max_bytes;
    uint32_t max_n;
    uint32_t n;
    bool more;
};

/* Whether an entry of entry bytes still fits (else more, stop the walk). */
static bool sec_list_fits(struct sec_list_ctx *x, size_t entry)
{
    /* + 1: the more byte of a page. */
    if (x->n >= x->max_n ||
        (x->n > 0 && x->w->len - x->body_start + entry + 1 > x->max_bytes)) {
        x->more = true;
        return false;
    }
    x->n++;
    return true;
}

static int sec_user_cb(void *arg, const struct idx_user_info *u)
{
    struct sec_list_ctx *x = arg;
    if (!sec_list_fits(x, proto_list_user_size(u->name))) {
        return 1;
    }
    proto_put_user_entry(x->w, u->name, u->flags, u->cred_len > 0);
    return x->w->err != 0;
}

static int sec_acl_cb(void *arg, const struct idx_acl *a)
{
    struct sec_list_ctx *x = arg;
    if (!sec_list_fits(x, proto_list_acl_size(a->user, a->ns, a->pattern))) {
        return 1;
    }
    proto_put_acl_entry(x->w, a->user, a->ns, a->pattern, a->perms);
    return x->w->err != 0;
}

static int sec_ns_cb(void *arg, const struct idx_namespace_info *ns)
{
    struct sec_list_ctx *x = arg;
    if (!sec_list_fits(x, proto_list_namespace_size(ns->name))) {
        return 1;
    }
    proto_put_namespace_entry(x->w, ns->name, ns->quota.max_queues,
                              ns->quota.max_bytes,
                              ns->quota.produce_bytes_per_s);
    return x->w->err != 0;
}

/* USER_LIST, ACL_LIST, NAMESPACE_LIST: served by any node from its index
 * (flushed state), paged as QUEUE_LIST (proto.h): a paged request gets
 * the entries after its cursor, at most its max_count and list_page_max
 * of them within list_answer_cap, and the more byte; an older client's
 * unpaged request gets every entry, or TERN_ELIMIT when they do not fit
 * in max_frame_bytes. */
static void serve_security_list(struct node_conn *c,
                                uint64_t request_id,
                                const struct proto_request *r)
{
    const struct node_config *cfg = c->view.cfg;
    struct idx_env *e = view_idx(&c->view);
    char user[PROTO_MAX_NAME + 1], after[PROTO_MAX_NAME + 1];
    char after_ns[PROTO_MAX_NAME + 1], after_pattern[PROTO_MAX_NAME + 1];
    struct sec_list_ctx x;
    struct tern_wbuf w;
    size_t start;
    int rv;

    if (e == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    name_copy(user, r->user, r->user_len);
    name_copy(after, r->after, r->after_len);
    name_copy(after_ns, r->after_ns, r->after_ns_len);
    name_copy(after_pattern, r->after_pattern, r->after_pattern_len);
    tern_wbuf_init(&w);
    memset(&x, 0, sizeof(x));
    x.w = &w;
    x.max_bytes = list_answer_cap(cfg, r->paged != 0);
    x.max_n = UINT32_MAX;
    if (r->paged) {
        x.max_n = cfg->list_page_max;
        if (r->max_count > 0) {
            x.max_n = TERN_MIN(x.max_n, r->max_count);
        }
    }
    start = proto_list_begin(&w, r->op, request_id);
    x.body_start = start + PROTO_HEADER_SIZE;
    if (r->op == PROTO_OP_USER_LIST) {
        rv = idx_user_list_after(e, after, sec_user_cb, &x);
    } else if (r->op == PROTO_OP_ACL_LIST) {
        struct idx_acl cursor = {after, after_ns, after_pattern, 0};
        rv = idx_acl_list_after(e, user, after[0] != '\0' ? &cursor : NULL,
                                sec_acl_cb, &x);
    } else {
        rv = idx_namespace_list_after(e, after, sec_ns_cb, &x);
    }
    if (rv == 0 && w.err == 0 && x.more && !r->paged) {
        char m[TERN_ERRMSG_SIZE];
        tern_wbuf_free(&w);
        (void)snprintf(m, sizeof(m),
                       "list does not fit in max_frame_bytes (%llu); "
                       "list it in pages (a newer client)",
                       (unsigned long long)cfg->max_frame_bytes);
        send_error(c, r->op, request_id, TERN_ELIMIT, m);
        return;
    }
    if (rv == 0 && w.err == 0) {
        rv = r->paged ? proto_list_end_page(&w, start, x.n, x.more)
                      : proto_list_end(&w, start, x.n);
    }
    if (rv != 0 || w.err != 0) {
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, rv != 0 ? rv : w.err,
                   rv != 0 ? idx_errmsg(e) : NULL);
        return;
    }
    conn_send(c, &w);
}

/* ---- Writes ------------------------------------------------------------- */

/* Answer TERN_ENOTLEADER (with the leader hint) unless this node is a
 * writable leader. Returns whether it refused. */
static bool refuse_unless_writable(struct node_conn *c,
                                   uint8_t op,
                                   uint64_t request_id,
                                   const struct repl_status *st)
{
    const struct node_config *cfg = c->view.cfg;
    const char *p;
    char m[TERN_ERRMSG_SIZE];

    if (st->writable) {
        return false;
    }
    if (st->transfer_to != 0 &&
        (p = view_client_addr(&c->view, st->transfer_to)) != NULL) {
        /* Handing over: point the client at the node about to lead. */
        (void)snprintf(m, sizeof(m),
                       "not the leader; leadership is moving to node %llu "
                       "at %s",
                       (unsigned long long)st->transfer_to, p);
        send_error(c, op, request_id, TERN_ENOTLEADER, m);
        return true;
    }
    p = view_client_addr(&c->view, st->leader_id);
    if (st->leader_id != 0 && st->leader_id != cfg->id && st->leader_silent) {
        (void)snprintf(m, sizeof(m),
                       "not the leader; leader node %llu silent for an "
                       "election timeout",
                       (unsigned long long)st->leader_id);
    } else if (st->leader_id != 0 && st->leader_id != cfg->id && p != NULL) {
        (void)snprintf(m, sizeof(m),
                       "not the leader; leader is node %llu at %s",
                       (unsigned long long)st->leader_id, p);
    } else if (st->leader_id == cfg->id) {
        (void)snprintf(m, sizeof(m), "leader not ready for writes yet");
    } else {
        (void)snprintf(m, sizeof(m), "not the leader; no leader known");
    }
    send_error(c, op, request_id, TERN_ENOTLEADER, m);
    return true;
}

/* Hand r to the batcher: answered by node_server_respond once its entry is
 * applied and flushed (the request holds a connection reference until
 * then), or now with the error if the batcher refuses it. */
static void batch_request(struct node_conn *c,
                          uint64_t request_id,
                          const struct proto_request *r)
{
    int rv = node_batcher_add(c->view.batcher, c, request_id, r);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    c->refs++;
}

/* PRODUCE_DELAYED's due time against [limits] max_delay_ms, by the clock
 * the batcher stamps entries with: answers TERN_EINVAL naming the key and
 * returns true when it is too far ahead. m: caller's errmsg buffer. */
static bool delay_refused(struct node_conn *c,
                          uint64_t request_id,
                          const struct proto_request *r,
                          char *m)
{
    const struct node_batcher *b = c->view.batcher;
    uint64_t max = c->view.cfg->max_delay_ms;
    uint64_t when = r->time_ms & ~PROTO_DELAY_AT;
    if ((r->time_ms & PROTO_DELAY_AT) == 0) {
        if (when <= max) {
            return false;
        }
        (void)snprintf(m, TERN_ERRMSG_SIZE, "delay %llu ms > max_delay_ms %llu",
                       (unsigned long long)when, (unsigned long long)max);
    } else {
        uint64_t now = b->ops.timestamp_ms(b->arg);
        if (when <= now || when - now <= max) {
            return false;
        }
        (void)snprintf(m, TERN_ERRMSG_SIZE,
                       "due time %llu is %llu ms ahead > max_delay_ms %llu",
                       (unsigned long long)when,
                       (unsigned long long)(when - now),
                       (unsigned long long)max);
    }
    send_error(c, r->op, request_id, TERN_EINVAL, m);
    return true;
}

/* A write reached a node that knows no leader (an election is under
 * way), follows a leader it has not heard from for an election timeout
 * (cut off or gone: an election is due; naming it would send the client
 * there), or leads without being writable yet (its barrier after the
 * election): hold it, at most one election timeout, and answer it with
 * the leader hint as soon as the node knows one (node_server_wake, which
 * node.c calls when the leader or writability changes), so the client
 * learns the new leader from the answer instead of polling the nodes.
 * Bounded by SERVER__HOLD_MAX in total and by the parked-fetch limits
 * (max_parked, max_parked_per_conn); past them, or out of memory, the
 * write is answered at once as before. Returns whether it was held. */
static bool hold_write(struct node_conn *c,
                       uint8_t op,
                       uint64_t request_id,
                       const struct repl_status *st)
{
    struct node_server *s = c->srv;
    const struct node_config *cfg = c->view.cfg;
    struct parked *p;
    if (s == NULL || s->closing || writes_have_a_home(st, cfg->id) ||
        cfg->election_timeout_ms == 0 || s->n_held >= SERVER__HOLD_MAX ||
        s->n_parked >= cfg->max_parked ||
        c->n_parked >= cfg->max_parked_per_conn) {
        return false;
    }
    p = tern_calloc(1, sizeof(*p));
    if (p == NULL) {
        return false;
    }
    p->c = c;
    p->op = op;
    p->request_id = request_id;
    p->hold = true;
    p->deadline = uv_now(s->loop) + cfg->election_timeout_ms;
    tern_list_push(&s->parked, &p->link);
    s->n_parked++;
    s->n_held++;
    c->n_parked++;
    c->refs++;
    park_arm(s);
    return true;
}

static void handle_write(struct node_conn *c,
                         uint64_t request_id,
                         const struct proto_request *r)
{
    const struct node_view *v = &c->view;
    const struct node_config *cfg = v->cfg;
    char m[TERN_ERRMSG_SIZE];
    struct repl_status st;
    int rv;

    view_status(v, &st);
    /* A leader with a full disk says so, also while it hands leadership
     * over (not writable then): "disk full" is the answer a client can act
     * on, a redirect to itself is not. */
    if (st.leader_id == cfg->id && (rv = v->ops.disk_check(v->arg, m)) != 0) {
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    if (hold_write(c, r->op, request_id, &st) ||
        refuse_unless_writable(c, r->op, request_id, &st)) {
        return;
    }
    if (r->op == PROTO_OP_PRODUCE_DELAYED &&
        delay_refused(c, request_id, r, m)) {
        return;
    }
    if (r->op == PROTO_OP_PRODUCE || r->op == PROTO_OP_PRODUCE_DELAYED) {
        size_t pos = 0;
        struct proto_msg msg;
        uint32_t i = 0;
        uint64_t bytes = 0;
        if (r->n_msgs == 0) {
            send_error(c, r->op, request_id, TERN_EINVAL,
                       "produce without messages");
            return;
        }
        while (proto_next_msg(r, &pos, &msg)) {
            if (msg.len > cfg->max_message_bytes) {
                (void)snprintf(
                    m, sizeof(m),
                    "message %u is %u bytes > max_message_bytes %llu", i,
                    msg.len, (unsigned long long)cfg->max_message_bytes);
                send_error(c, r->op, request_id, TERN_ETOOBIG, m);
                return;
            }
            bytes += msg.len;
            i++;
        }
        /* Properties: refused here, naming the limit, before anything is
         * proposed (the validator of every node would refuse them too). */
        pos = 0;
        for (i = 0; r->props_len > 0 && proto_next_props(r, &pos, &msg); i++) {
            char pm[TERN_ERRMSG_SIZE];
            if (msg.len > 0 &&
                (rv = idx_props_check(msg.data, msg.len, pm)) != 0) {
                (void)snprintf(m, sizeof(m), "message %u: %.200s", i, pm);
                send_error(c, r->op, request_id,
                           rv == TERN_ETOOBIG ? TERN_ETOOBIG : TERN_EINVAL, m);
                return;
            }
            bytes += msg.len;
        }
        if (c->srv == NULL) {
            send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
            return;
        }
        if (r->producer_id != 0 &&
            (rv = node_access_producer(c->srv->access, &c->who, view_idx(v),
                                       r->producer_id, m)) != 0) {
            send_error(c, r->op, request_id, rv, m);
            return;
        }
        if ((rv = node_access_rate(c->srv->access, &c->who, view_idx(v), bytes,
                                   conn_now(c), m)) != 0) {
            send_error(c, r->op, request_id, rv, m);
            return;
        }
    }
    rv = v->ops.disk_check(v->arg, m);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    batch_request(c, request_id, r);
}

/* GROUP_FETCH: only a writable leader serves it, behind a read barrier
 * (batch.c): the consumer starts at or above every offset its group had
 * committed when it asked, also right after a leader change. With the disk
 * alarm on, the barrier cannot be appended: the leader serves from its
 * applied state directly (a leader deposed without knowing it yet may then
 * answer with an older offset; documented in README). */
static void handle_group_fetch(struct node_conn *c,
                               uint64_t request_id,
                               const struct proto_request *r,
                               const char *queue,
                               const char *group)
{
    const struct node_view *v = &c->view;
    char m[TERN_ERRMSG_SIZE];
    struct repl_status st;

    view_status(v, &st);
    if (refuse_unless_writable(c, r->op, request_id, &st)) {
        return;
    }
    if (v->ops.disk_check(v->arg, m) != 0) {
        struct node_fetch_filter ff;
        filter_from_req(r, &ff);
        serve_fetch(c, r->op, request_id, queue, group, 0, r->max_msgs,
                    r->max_bytes, r->wait_ms, true, &ff, false);
        return;
    }
    batch_request(c, request_id, r);
}

/* ---- Shared groups (docs/WORKQUEUES.md) ------------------------------- */

/* The leader's clock for plans: the timestamp new entries get. */
static uint64_t leader_time(const struct node_conn *c)
{
    const struct node_batcher *b = c->view.batcher;
    return b->ops.timestamp_ms(b->arg);
}

struct receive_ctx
{
    struct tern_wbuf *w;
    size_t start; /* the answer frame's start in w */
    size_t cap;   /* stop adding at this many frame bytes (one at least) */
    const struct idx_deliver_item *items; /* the DELIVER's, in offset order */
    uint32_t n_items;
    uint32_t k;    /* the item of the next message */
    uint32_t n;    /* messages added */
    uint32_t sent; /* items[0..sent) are answered (or were trimmed) */
};

static int receive_cb(void *arg, const struct idx_fetched *m)
{
    struct receive_ctx *x = arg;
    struct proto_fetched_msg pm = {m->offset, m->timestamp_ms, m->data,
                                   m->len,    m->props,        m->props_len};
    if (x->n > 0 && x->w->len - x->start >= x->cap) {
        return 1;
    }
    while (x->k < x->n_items && x->items[x->k].offset != m->offset) {
        x->k++;
    }
    if (x->k == x->n_items) {
        return 1; /* cannot happen: idx_messages_get keeps the order */
    }
    proto_put_received(x->w, &pm, x->items[x->k].count + 1);
    x->n++;
    x->sent = x->k + 1;
    return x->w->err;
}

/* A RECEIVE answer stops adding messages at this many frame bytes. */
static size_t receive_cap(const struct node_conn *c)
{
    return TERN_MAX((size_t)(c->view.cfg->max_frame_bytes / 2), (size_t)1);
}

/* The leases w's DELIVER granted from items[from] on will not reach their
 * consumer: its connection closed while the DELIVER committed (the close
 * found no row to release, as release_leases reads applied state), or the
 * answer was full. On a writable leader they are released now, as on a
 * close, instead of waiting for the ack timeout. */
static void release_granted(struct node_conn *c,
                            const struct node_wreq *w,
                            uint32_t from)
{
    struct idx_settle_item *items;
    struct repl_status st;
    uint32_t n = 0;
    int rv;
    if (from >= w->n_items) {
        return;
    }
    /* c->srv is gone once c closed; a stopping node reports itself not
     * writable. */
    view_status(&c->view, &st);
    if (!st.writable) {
        return;
    }
    items = tern_calloc(w->n_items - from, sizeof(*items));
    if (items == NULL) {
        return;
    }
    for (uint32_t i = from; i < w->n_items && i < IDX_SHARED_LIST_MAX; i++) {
        if (((w->result.done[i / 64] >> (i % 64)) & 1u) != 0) {
            items[n].offset = w->items[i].offset;
            items[n].count = w->items[i].count + 1;
            items[n].action = IDX_SETTLE_RELEASE;
            n++;
        }
    }
    rv = n == 0 ? 0
                : node_batcher_add_settle(c->view.batcher, w->queue, w->group,
                                          items, n);
    if (n > 0) {
        node_log(rv == 0 ? NODE_LOG_DEBUG : NODE_LOG_WARN,
                 rv == 0 ? "undelivered leases released"
                         : "undelivered lease release not proposed",
                 "conn=%llu queue=%s group=%s n=%u err=%s",
                 (unsigned long long)c->id, w->queue, w->group, n,
                 rv == 0 ? "-" : tern_err_name(rv));
    }
    tern_free(items);
}

/* The DELIVER of w is applied and flushed: answer with the messages it
 * leased, read from the index in one pass (a record holding several of
 * them is read once). An answer stops at half of max_frame_bytes (at
 * least one message); leases past it are not sent and are released
 * (release_granted). A message trimmed meanwhile is skipped (its lease is
 * moot). */
static void receive_answer(struct node_conn *c, const struct node_wreq *w)
{
    struct idx_env *e = view_idx(&c->view);
    struct idx_queue_info qi;
    struct tern_wbuf b;
    struct receive_ctx x = {&b, 0, 0, w->items, w->n_items, 0, 0, 0};
    uint64_t offs[IDX_SHARED_LIST_MAX];
    uint32_t n = 0;
    int rv;
    if (e == NULL) {
        send_error(c, w->op, w->request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    rv = idx_queue_get(e, w->queue, &qi);
    if (rv != 0) {
        send_error(c, w->op, w->request_id, rv, NULL);
        release_granted(c, w, 0);
        return;
    }
    for (uint32_t i = 0; i < w->n_items && i < IDX_SHARED_LIST_MAX; i++) {
        if (((w->result.done[i / 64] >> (i % 64)) & 1u) != 0) {
            offs[n++] = w->items[i].offset;
        }
    }
    tern_wbuf_init(&b);
    x.cap = receive_cap(c);
    x.start = proto_receive_begin(&b, w->request_id, qi.id);
    rv = n > 0 ? idx_messages_get(e, w->queue, offs, n, receive_cb, &x) : 0;
    if (rv == 0) {
        rv = proto_receive_end(&b, x.start, x.n);
    }
    if (rv != 0) {
        tern_wbuf_free(&b);
        send_error(c, w->op, w->request_id, rv, NULL);
        release_granted(c, w, 0);
        return;
    }
    conn_send(c, &b);
    release_granted(c, w, x.sent);
}

/* An empty RECEIVE answer. */
static void receive_empty(struct node_conn *c,
                          uint64_t request_id,
                          const char *queue)
{
    struct idx_env *e = view_idx(&c->view);
    struct idx_queue_info qi;
    struct tern_wbuf b;
    int rv = e == NULL ? TERN_ESHUTDOWN : idx_queue_get(e, queue, &qi);
    if (rv != 0) {
        send_error(c, PROTO_OP_RECEIVE, request_id, rv, NULL);
        return;
    }
    tern_wbuf_init(&b);
    size_t start = proto_receive_begin(&b, request_id, qi.id);
    if (proto_receive_end(&b, start, 0) != 0) {
        tern_wbuf_free(&b);
        send_error(c, PROTO_OP_RECEIVE, request_id, TERN_EINTERNAL, NULL);
        return;
    }
    conn_send(c, &b);
}

/* Whether a plan for consumer_id would deliver something now (or fail:
 * the error is then answered). */
static bool receive_due(struct node_conn *c,
                        const char *queue,
                        const char *group,
                        uint64_t consumer_id)
{
    struct idx_env *e = view_idx(&c->view);
    struct idx_deliver_item one, dead;
    uint32_t n = 0, n_dead = 0;
    if (e == NULL) {
        return true;
    }
    if (delivering_find(c->srv, queue, group) != NULL) {
        return false; /* re-planned after the flush that answers it */
    }
    return idx_deliver_plan(e, queue, group, consumer_id, 1, 0, 0,
                            c->view.cfg->shared_prefetch, leader_time(c), &one,
                            &n, &dead, 1, &n_dead) != 0 ||
           n > 0 || n_dead > 0;
}

/* Park a RECEIVE with nothing to deliver (the fetch long-poll slots and
 * their bounds). false: answered (bound reached, or no memory). */
static bool receive_park(struct node_conn *c,
                         uint64_t request_id,
                         const char *queue,
                         const char *group,
                         uint64_t consumer_id,
                         uint32_t max_msgs,
                         uint32_t wait_ms)
{
    struct node_server *s = c->srv;
    const struct node_config *cfg = c->view.cfg;
    char m[TERN_ERRMSG_SIZE];
    struct parked *p;
    if (s == NULL) {
        return false;
    }
    if (c->n_parked >= cfg->max_parked_per_conn ||
        s->n_parked >= cfg->max_parked) {
        (void)snprintf(m, sizeof(m), "%s reached: too many long polls waiting",
                       c->n_parked >= cfg->max_parked_per_conn
                           ? "max_parked_per_conn"
                           : "max_parked");
        send_error(c, PROTO_OP_RECEIVE, request_id, TERN_ELIMIT, m);
        return true;
    }
    p = tern_calloc(1, sizeof(*p));
    if (p == NULL || !copy_whole(p->queue, sizeof(p->queue), queue) ||
        !copy_whole(p->group, sizeof(p->group), group)) {
        tern_free(p);
        return false;
    }
    p->c = c;
    p->op = PROTO_OP_RECEIVE;
    p->request_id = request_id;
    p->max_msgs = max_msgs;
    p->consumer_id = consumer_id;
    p->leader_only = true;
    p->deadline = uv_now(s->loop) + TERN_MIN(wait_ms, SERVER__MAX_WAIT_MS);
    tern_list_push(&s->parked, &p->link);
    s->n_parked++;
    c->n_parked++;
    c->refs++;
    park_arm(s);
    return true;
}

/* Plan and propose a RECEIVE of consumer_id on the writable leader:
 * dead letters first (rows past max_deliveries), then the DELIVER, whose
 * answer follows its apply (receive_answer); nothing due: park for
 * wait_ms, or answer empty. */
static void receive_now(struct node_conn *c,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        uint64_t consumer_id,
                        uint32_t max_msgs,
                        uint32_t wait_ms)
{
    const struct node_view *v = &c->view;
    struct idx_env *e = view_idx(v);
    struct idx_deliver_item dead[SERVER__SHARED_DEAD];
    struct idx_deliver_item *items;
    uint32_t n = 0, n_dead = 0;
    struct repl_status st;
    char m[TERN_ERRMSG_SIZE];
    size_t cap;
    int rv;

    view_status(v, &st);
    if (refuse_unless_writable(c, PROTO_OP_RECEIVE, request_id, &st)) {
        return;
    }
    if (e == NULL) {
        send_error(c, PROTO_OP_RECEIVE, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    if ((rv = v->ops.disk_check(v->arg, m)) != 0) {
        send_error(c, PROTO_OP_RECEIVE, request_id, rv, m);
        return;
    }
    if (wait_ms > 0 && delivering_find(c->srv, queue, group) != NULL &&
        receive_park(c, request_id, queue, group, consumer_id, max_msgs,
                     wait_ms)) {
        return;
    }
    max_msgs = TERN_MIN(max_msgs, IDX_SHARED_LIST_MAX);
    items = tern_calloc(max_msgs, sizeof(*items));
    if (items == NULL) {
        send_error(c, PROTO_OP_RECEIVE, request_id, -ENOMEM, NULL);
        return;
    }
    /* Planned to fit one answer: its records (each message's bytes and
     * framing) within its cap less the bytes before them; receive_cb adds
     * a record while the answer is under the cap. */
    cap = receive_cap(c);
    rv = idx_deliver_plan(
        e, queue, group, consumer_id, max_msgs,
        cap > SERVER__RECEIVE_PREFIX ? cap - SERVER__RECEIVE_PREFIX : 1,
        SERVER__RECEIVED_FRAMING, v->cfg->shared_prefetch, leader_time(c),
        items, &n, dead, SERVER__SHARED_DEAD, &n_dead);
    if (rv != 0) {
        tern_free(items);
        send_error(c, PROTO_OP_RECEIVE, request_id, rv, NULL);
        return;
    }
    for (uint32_t i = 0; i < n_dead; i++) {
        int dv = node_batcher_add_dead_letter(v->batcher, e, queue, group,
                                              &dead[i], "max-deliveries");
        if (dv != 0) {
            node_log(NODE_LOG_WARN, "dead letter not proposed",
                     "queue=%s group=%s offset=%llu err=%s", queue, group,
                     (unsigned long long)dead[i].offset, tern_err_name(dv));
        }
    }
    if (n > 0) {
        rv = node_batcher_add_deliver(v->batcher, c, request_id, queue, group,
                                      consumer_id, items, n);
        tern_free(items);
        if (rv != 0) {
            send_error(c, PROTO_OP_RECEIVE, request_id, rv, NULL);
            return;
        }
        conn_delivering(c, queue, group, +1);
        c->refs++;
        return;
    }
    tern_free(items);
    if (wait_ms > 0 && receive_park(c, request_id, queue, group, consumer_id,
                                    max_msgs, wait_ms)) {
        return;
    }
    receive_empty(c, request_id, queue);
}

/* RECEIVE and CLAIM name the consumer: the client's producer id, which
 * its user may use; one per connection. true: refused (answered). */
static bool consumer_refused(struct node_conn *c,
                             uint64_t request_id,
                             const struct proto_request *r)
{
    char m[TERN_ERRMSG_SIZE];
    int rv;
    if (c->consumer_id != 0 && c->consumer_id != r->consumer_id) {
        send_error(c, r->op, request_id, TERN_EINVAL,
                   "one consumer id per connection");
        return true;
    }
    if (c->consumer_id == 0 &&
        (rv = node_access_producer(c->srv->access, &c->who, view_idx(&c->view),
                                   r->consumer_id, m)) != 0) {
        send_error(c, r->op, request_id, rv, m);
        return true;
    }
    return false;
}

/* RECEIVE: the consumer id must be the client's (a producer id it may
 * use); the connection remembers it and the groups it received from, to
 * release their leases when it closes. */
static void handle_receive(struct node_conn *c,
                           uint64_t request_id,
                           const struct proto_request *r,
                           const char *queue,
                           const char *group)
{
    char m[TERN_ERRMSG_SIZE];
    unsigned i;
    if (c->srv == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    if (consumer_refused(c, request_id, r)) {
        return;
    }
    for (i = 0; i < c->n_shared; i++) {
        if (strcmp(c->shared[i].queue, queue) == 0 &&
            strcmp(c->shared[i].group, group) == 0) {
            break;
        }
    }
    if (i == c->n_shared) {
        if (c->n_shared == SERVER__SHARED_GROUPS) {
            (void)snprintf(m, sizeof(m),
                           "a connection receives from at most %u shared "
                           "groups",
                           SERVER__SHARED_GROUPS);
            send_error(c, r->op, request_id, TERN_ELIMIT, m);
            return;
        }
        (void)copy_whole(c->shared[i].queue, sizeof c->shared[i].queue, queue);
        (void)copy_whole(c->shared[i].group, sizeof c->shared[i].group, group);
        c->n_shared++;
    }
    c->consumer_id = r->consumer_id;
    receive_now(c, request_id, queue, group, r->consumer_id, r->max_msgs,
                r->wait_ms);
}

struct release_ctx
{
    uint64_t consumer_id;
    struct idx_settle_item items[IDX_SHARED_LIST_MAX];
    uint32_t n;
};

static int release_cb(void *arg, const struct idx_lease *l)
{
    struct release_ctx *x = arg;
    if (l->ready == 0 && l->consumer_id == x->consumer_id) {
        x->items[x->n].offset = l->offset;
        x->items[x->n].count = l->count;
        x->items[x->n].action = IDX_SETTLE_RELEASE;
        x->items[x->n].delay_ms = 0;
        x->n++;
    }
    return x->n == IDX_SHARED_LIST_MAX ? 1 : 0;
}

/* c is closing: on a writable leader, release the leases its consumer id
 * holds in the groups it received from (at most IDX_SHARED_LIST_MAX per
 * group among its first SERVER__RELEASE_SCAN lease rows; the rest end by
 * expiry). */
static void release_leases(struct node_conn *c)
{
    struct idx_env *e = view_idx(&c->view);
    struct repl_status st;
    struct release_ctx *x;
    if (c->consumer_id == 0 || c->n_shared == 0 || c->srv == NULL ||
        c->srv->closing || e == NULL) {
        return;
    }
    view_status(&c->view, &st);
    if (!st.writable) {
        return;
    }
    x = tern_malloc(sizeof(*x));
    if (x == NULL) {
        return;
    }
    for (unsigned i = 0; i < c->n_shared; i++) {
        x->consumer_id = c->consumer_id;
        x->n = 0;
        if (idx_shared_leases(e, c->shared[i].queue, c->shared[i].group, 0,
                              SERVER__RELEASE_SCAN, release_cb, x) != 0 ||
            x->n == 0) {
            continue;
        }
        int rv = node_batcher_add_settle(c->view.batcher, c->shared[i].queue,
                                         c->shared[i].group, x->items, x->n);
        node_log(rv == 0 ? NODE_LOG_DEBUG : NODE_LOG_WARN,
                 rv == 0 ? "leases released" : "lease release not proposed",
                 "conn=%llu queue=%s group=%s n=%u err=%s",
                 (unsigned long long)c->id, c->shared[i].queue,
                 c->shared[i].group, x->n, rv == 0 ? "-" : tern_err_name(rv));
    }
    tern_free(x);
}

/* ---- Single active consumer of stream groups (docs/WORKQUEUES.md) ------ */

/* "group G of queue Q is held by consumer X until T" into m. */
static void claim_busy_msg(char *m,
                           const char *queue,
                           const char *group,
                           const struct idx_claim *cl)
{
    (void)snprintf(m, TERN_ERRMSG_SIZE,
                   "group %s of queue %s is held by consumer %llu until %llu "
                   "(ms)",
                   group, queue, (unsigned long long)cl->holder,
                   (unsigned long long)cl->until_ms);
}

/* A GROUP_FETCH of a group whose live claim (until above this node's
 * clock) is another consumer's: answers TERN_ECLAIMED naming holder and
 * until and returns true. */
static bool claim_refuses_fetch(struct node_conn *c,
                                uint64_t request_id,
                                const char *queue,
                                const char *group)
{
    struct idx_env *e = view_idx(&c->view);
    struct idx_claim cl;
    char m[TERN_ERRMSG_SIZE];
    if (e == NULL || idx_claim_get(e, queue, group, &cl) != 0 ||
        cl.holder == 0 || cl.holder == c->consumer_id ||
        cl.until_ms <= leader_time(c)) {
        return false;
    }
    claim_busy_msg(m, queue, group, &cl);
    send_error(c, PROTO_OP_GROUP_FETCH, request_id, TERN_ECLAIMED, m);
    return true;
}

/* CLAIM: a write of the writable leader, by the client's consumer id
 * (checked and pinned as RECEIVE's), with the lease within [limits]
 * claim_lease_min_ms..claim_lease_max_ms (0: the default). */
static void handle_claim(struct node_conn *c,
                         uint64_t request_id,
                         const struct proto_request *r,
                         const char *queue,
                         const char *group)
{
    const struct node_config *cfg = c->view.cfg;
    uint32_t lease = r->lease_ms;
    struct repl_status st;
    char m[TERN_ERRMSG_SIZE];
    unsigned i;
    int rv;
    if (r->flags == PROTO_CLAIM_ACQUIRE) {
        if (lease == 0) {
            lease = TERN_MIN(
                TERN_MAX(NODE_DEFAULT_CLAIM_LEASE_MS, cfg->claim_lease_min_ms),
                cfg->claim_lease_max_ms);
        }
        if (lease < cfg->claim_lease_min_ms ||
            lease > cfg->claim_lease_max_ms) {
            (void)snprintf(m, sizeof(m),
                           "lease %u ms is outside claim_lease_min_ms %u .. "
                           "claim_lease_max_ms %u",
                           lease, cfg->claim_lease_min_ms,
                           cfg->claim_lease_max_ms);
            send_error(c, r->op, request_id, TERN_EINVAL, m);
            return;
        }
    }
    view_status(&c->view, &st);
    if (refuse_unless_writable(c, r->op, request_id, &st)) {
        return;
    }
    if (consumer_refused(c, request_id, r)) {
        return;
    }
    if ((rv = c->view.ops.disk_check(c->view.arg, m)) != 0) {
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    for (i = 0; i < c->n_claims; i++) {
        if (strcmp(c->claims[i].queue, queue) == 0 &&
            strcmp(c->claims[i].group, group) == 0) {
            break;
        }
    }
    if (i == c->n_claims && r->flags == PROTO_CLAIM_ACQUIRE) {
        if (c->n_claims == SERVER__CLAIM_GROUPS) {
            (void)snprintf(m, sizeof(m),
                           "a connection claims at most %u groups",
                           SERVER__CLAIM_GROUPS);
            send_error(c, r->op, request_id, TERN_ELIMIT, m);
            return;
        }
        (void)copy_whole(c->claims[i].queue, sizeof c->claims[i].queue, queue);
        (void)copy_whole(c->claims[i].group, sizeof c->claims[i].group, group);
        c->n_claims++;
    }
    c->consumer_id = r->consumer_id;
    rv = node_batcher_add_claim(
        c->view.batcher, c, request_id, queue, group, r->consumer_id,
        r->flags == PROTO_CLAIM_ACQUIRE ? IDX_CLAIM_ACQUIRE : IDX_CLAIM_RELEASE,
        r->flags == PROTO_CLAIM_ACQUIRE ? lease : 0);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    c->refs++;
}

/* The answer of an applied CLAIM (status 0 or TERN_ECLAIMED), or of a
 * GROUP_COMMIT a claim refused: true when w was answered here. */
static bool claim_respond(struct node_conn *c, const struct node_wreq *w)
{
    const struct idx_claim *cl = &w->result.claim;
    if (w->op == PROTO_OP_CLAIM &&
        (w->status == 0 || w->status == TERN_ECLAIMED)) {
        struct tern_wbuf b;
        tern_wbuf_init(&b);
        proto_encode_claim_resp(&b, w->request_id, w->result.count == 1,
                                cl->holder, cl->until_ms);
        conn_send(c, &b);
        return true;
    }
    if (w->op == PROTO_OP_GROUP_COMMIT && w->status == TERN_ECLAIMED &&
        cl->holder != 0) {
        char m[TERN_ERRMSG_SIZE];
        (void)snprintf(
            m, sizeof(m), "the group is held by consumer %llu until %llu (ms)",
            (unsigned long long)cl->holder, (unsigned long long)cl->until_ms);
        send_error(c, w->op, w->request_id, TERN_ECLAIMED, m);
        return true;
    }
    return false;
}

/* c is closing: on a writable leader, release the claims its consumer id
 * holds (one CLAIM release per group it claimed, at most
 * SERVER__CLAIM_GROUPS; a claim of a group that moved on changes
 * nothing at apply). */
static void release_claims(struct node_conn *c)
{
    struct idx_env *e = view_idx(&c->view);
    struct repl_status st;
    if (c->consumer_id == 0 || c->n_claims == 0 || c->srv == NULL ||
        c->srv->closing || e == NULL) {
        return;
    }
    view_status(&c->view, &st);
    if (!st.writable) {
        return;
    }
    for (unsigned i = 0; i < c->n_claims; i++) {
        struct idx_claim cl;
        if (idx_claim_get(e, c->claims[i].queue, c->claims[i].group, &cl) !=
                0 ||
            cl.holder != c->consumer_id) {
            continue;
        }
        int rv = node_batcher_add_claim(c->view.batcher, NULL, 0,
                                        c->claims[i].queue, c->claims[i].group,
                                        c->consumer_id, IDX_CLAIM_RELEASE, 0);
        node_log(rv == 0 ? NODE_LOG_DEBUG : NODE_LOG_WARN,
                 rv == 0 ? "claim released" : "claim release not proposed",
                 "conn=%llu queue=%s group=%s err=%s",
                 (unsigned long long)c->id, c->claims[i].queue,
                 c->claims[i].group, rv == 0 ? "-" : tern_err_name(rv));
    }
}

void node_server_respond(struct node_wreq *w)
{
    struct node_conn *c = w->owner;
    if (c == NULL) {
        return;
    }
    if (w->op == PROTO_OP_RECEIVE) {
        conn_delivering(c, w->queue, w->group, -1);
    }
    if (c->srv != NULL &&
        (w->op == PROTO_OP_PRODUCE || w->op == PROTO_OP_PRODUCE_DELAYED)) {
        if (w->status == 0) {
            node_metrics_produced(c->srv->metrics, w->result.count,
                                  w->msg_bytes);
        }
        uint64_t now = uv_hrtime();
        uint64_t stay = now - w->added_ns;
        node_metrics_produce_latency(c->srv->metrics, stay);
        if (w->status == 0 && w->applied_ns != 0) {
            repl_latency_record(&c->srv->stages[NODE_STAGE_TO_PROPOSE],
                                w->proposed_ns - w->added_ns);
            repl_latency_record(&c->srv->stages[NODE_STAGE_TO_ANSWER],
                                now - w->applied_ns);
            repl_latency_record(&c->srv->stages[NODE_STAGE_RESIDENCE], stay);
        }
    }
    if (!conn_live(c) && w->op == PROTO_OP_RECEIVE && w->status == 0) {
        release_granted(c, w, 0);
    }
    if (conn_live(c)) {
        if (claim_respond(c, w)) {
            /* answered */
        } else if (w->status != 0) {
            const char *m = tern_strerror(w->status);
            send_error(c, w->op, w->request_id, w->status, m);
        } else if (w->op == PROTO_OP_RECEIVE) {
            receive_answer(c, w);
        } else if (w->op == PROTO_OP_SETTLE) {
            uint8_t done[IDX_SHARED_LIST_MAX];
            struct tern_wbuf b;
            for (uint32_t i = 0; i < w->n_items; i++) {
                done[i] = (uint8_t)((w->result.done[i / 64] >> (i % 64)) & 1u);
            }
            tern_wbuf_init(&b);
            proto_encode_settle_resp(&b, w->request_id, done, w->n_items);
            conn_send(c, &b);
        } else if (w->op == PROTO_OP_GROUP_FETCH) {
            /* The barrier is applied and flushed: serve the read now. */
            serve_fetch(c, w->op, w->request_id, w->queue, w->group, 0,
                        w->max_msgs, w->max_bytes, w->wait_ms, true, &w->filter,
                        false);
        } else {
            struct tern_wbuf b;
            tern_wbuf_init(&b);
            if (w->op == PROTO_OP_PRODUCE) {
                proto_encode_produce_resp(&b, w->request_id,
                                          w->result.base_offset,
                                          w->result.count, w->result.duplicate);
            } else if (w->op == PROTO_OP_PRODUCE_DELAYED) {
                /* A resend answers the first batch's due time. */
                proto_encode_produce_delayed_resp(
                    &b, w->request_id, w->result.count,
                    w->result.duplicate ? w->result.base_offset : w->due_ms);
            } else if (w->op == PROTO_OP_PRODUCER_INIT) {
                /* The index hands the new id out as base_offset. */
                proto_encode_producer_init_resp(&b, w->request_id,
                                                w->result.base_offset);
            } else {
                proto_encode_empty_resp(&b, w->op, w->request_id);
            }
            conn_send(c, &b);
        }
    }
    conn_unref(c);
}

/* ---- Leadership transfer ------------------------------------------------ */

static void transfer_done(void *data,
                          int status,
                          uint64_t target,
                          uint64_t leader_id,
                          uint64_t term)
{
    struct conn_wait *t = data;
    struct node_conn *c = t->c;
    char m[TERN_ERRMSG_SIZE];
    if (conn_live(c)) {
        if (status == 0) {
            struct tern_wbuf w;
            tern_wbuf_init(&w);
            proto_encode_cluster_transfer_resp(&w, t->request_id, leader_id,
                                               term);
            conn_send(c, &w);
        } else {
            if (status == TERN_ETRANSFER) {
                (void)snprintf(m, sizeof(m),
                               "leadership transfer to node %llu did not "
                               "complete within an election timeout",
                               (unsigned long long)target);
            } else {
                (void)snprintf(
                    m, sizeof(m), "leadership transfer to node %llu: %s",
                    (unsigned long long)target, tern_strerror(status));
            }
            send_error(c, PROTO_OP_CLUSTER_TRANSFER, t->request_id, status, m);
        }
    }
    conn_wait_end(t);
}

static void handle_transfer(struct node_conn *c,
                            uint64_t request_id,
                            const struct proto_request *r)
{
    struct conn_wait *t;
    struct repl_status st;
    char m[TERN_ERRMSG_SIZE];
    int rv;
    view_status(&c->view, &st);
    if (st.role != REPL_LEADER) {
        (void)refuse_unless_writable(c, r->op, request_id, &st);
        return;
    }
    if (r->to_id == c->view.cfg->id) {
        /* Leads already: done (so a resent request is answered alike). */
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        proto_encode_cluster_transfer_resp(&w, request_id, r->to_id, st.term);
        conn_send(c, &w);
        return;
    }
    t = conn_wait_new(c, r->op, request_id, sizeof(*t));
    if (t == NULL) {
        return;
    }
    m[0] = '\0';
    rv = c->view.ops.transfer(c->view.arg, r->to_id, transfer_done, t, m);
    if (rv != 0) {
        tern_free(t);
        send_error(c, r->op, request_id, rv, m[0] != '\0' ? m : NULL);
        return;
    }
    c->refs++;
}

/* ---- Frames -------------------------------------------------------------- */

/* The source address of c, printable, into addr (caller-owned,
 * INET_ADDRSTRLEN bytes). */
static void conn_addr(const struct node_conn *c, char *addr)
{
    struct in_addr in;
    in.s_addr = c->peer_ip;
    if (inet_ntop(AF_INET, &in, addr, INET_ADDRSTRLEN) == NULL) {
        (void)snprintf(addr, INET_ADDRSTRLEN, "?");
    }
}

/* Answer a delayed failed login: TERN_EAUTH, then close once written. */
static void auth_wait_end(struct auth_wait *w)
{
    struct node_conn *c = w->c;
    tern_list_remove(&w->link);
    c->auth_wait = false;
    if (c->state == CONN_OPEN) {
        send_error(c, w->op, w->request_id, TERN_EAUTH, w->message);
        conn_drain(c);
    }
    tern_free(w);
    conn_unref(c);
}

static void on_auth_timer(uv_timer_t *t)
{
    struct node_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    while (!tern_list_empty(&s->auth_waits)) {
        struct auth_wait *w =
            TERN_CONTAINER(s->auth_waits.next, struct auth_wait, link);
        if (w->due > now) {
            (void)uv_timer_start(&s->auth_timer, on_auth_timer, w->due - now,
                                 0);
            return;
        }
        auth_wait_end(w);
    }
}

/* A failed login of c: answer TERN_EAUTH with message and close, after
 * auth_failure_delay_ms (at once when it is 0 or nothing can be
 * allocated for the wait). */
static void auth_fail(struct node_conn *c,
                      uint8_t op,
                      uint64_t request_id,
                      const char *message)
{
    struct node_server *s = c->srv;
    unsigned delay = c->view.cfg->auth_failure_delay_ms;
    struct auth_wait *w = delay > 0 ? tern_malloc(sizeof(*w)) : NULL;

    if (w == NULL) {
        send_error(c, op, request_id, TERN_EAUTH, message);
        conn_drain(c);
        return;
    }
    w->c = c;
    w->op = op;
    w->request_id = request_id;
    w->due = uv_now(s->loop) + delay;
    (void)snprintf(w->message, sizeof(w->message), "%s", message);
    c->refs++;
    c->auth_wait = true; /* stops reading and processing */
    conn_update_reading(c);
    if (tern_list_empty(&s->auth_waits)) {
        (void)uv_timer_start(&s->auth_timer, on_auth_timer, delay, 0);
    }
    tern_list_push(&s->auth_waits, &w->link); /* due is never earlier */
}

/* May this node judge a login: has its index caught up with what the
 * cluster committed while it was down (repl_status.caught_up)? A node
 * that has not could miss a user created, deleted or given a new password
 * meanwhile, and would refuse a good login as a bad one, or take an old
 * password. Until then every AUTH_START is TERN_EBUSY, before any name
 * or proof is looked at: the answer tells nothing about a user, and no
 * guess is judged, so it counts as no failure. If not, m gets why. */
static bool auth_caught_up(struct node_conn *c, char *m)
{
    struct repl_status st;
    view_status(&c->view, &st);
    if (st.caught_up) {
        return true;
    }
    if (st.catch_up_to == 0) {
        (void)snprintf(m, TERN_ERRMSG_SIZE,
                       "the node has heard from no leader since it started, "
                       "so its users may be out of date: retry, or log in "
                       "on another node");
    } else {
        (void)snprintf(m, TERN_ERRMSG_SIZE,
                       "the node is catching up with the log (applied %llu "
                       "of %llu), so its users may be out of date: retry, "
                       "or log in on another node",
                       (unsigned long long)st.last_applied,
                       (unsigned long long)st.catch_up_to);
    }
    return false;
}

/* AUTH_START / AUTH_CONTINUE (access.c): the answer; TERN_ETHROTTLED for
 * an AUTH_START from an address over auth_failures_per_minute; or, after
 * auth_failure_delay_ms, TERN_EAUTH and the connection is closed once it
 * is written. */
static void serve_auth(struct node_conn *c,
                       uint64_t request_id,
                       const struct proto_request *r)
{
    struct node_server *s = c->srv;
    const char *cn = c->tls != NULL ? node_ctls_peer_cn(c->tls) : "";
    char addr[INET_ADDRSTRLEN];
    char m[TERN_ERRMSG_SIZE];
    const void *reply = NULL;
    struct tern_wbuf w;
    size_t n = 0;
    unsigned dropped = 0;
    int rv;

    if (s == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    if (r->op == PROTO_OP_AUTH_START &&
        node_access_login_allowed(s->access, c->peer_ip, conn_now(c), m) != 0) {
        s->auth_throttled++;
        if (log_limit_ok(&s->log_throttled, conn_now(c), &dropped)) {
            conn_addr(c, addr);
            node_log(NODE_LOG_WARN, "client login throttled",
                     "conn=%llu addr=%s throttled=%llu suppressed=%u "
                     "detail=\"%s\"",
                     (unsigned long long)c->id, addr,
                     (unsigned long long)s->auth_throttled, dropped, m);
        }
        send_error(c, r->op, request_id, TERN_ETHROTTLED, m);
        return;
    }
    if (r->op == PROTO_OP_AUTH_START && !auth_caught_up(c, m)) {
        send_error(c, r->op, request_id, TERN_EBUSY, m);
        return;
    }
    rv = node_access_auth(s->access, &c->who, view_idx(&c->view), r, cn, &reply,
                          &n, m);
    if (rv != 0) {
        s->auth_failed++;
        node_access_login_failed(s->access, c->peer_ip, conn_now(c));
        if (log_limit_ok(&s->log_auth, conn_now(c), &dropped)) {
            conn_addr(c, addr);
            node_log(NODE_LOG_WARN, "client authentication failed, closing",
                     "conn=%llu addr=%s failed=%llu suppressed=%u "
                     "detail=\"%s\"",
                     (unsigned long long)c->id, addr,
                     (unsigned long long)s->auth_failed, dropped, m);
        }
        auth_fail(c, r->op, request_id, m);
        return;
    }
    tern_wbuf_init(&w);
    rv = proto_encode_auth_resp(&w, r->op, request_id, reply, (uint32_t)n);
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, TERN_EINTERNAL,
                   "cannot encode the answer");
        conn_drain(c);
        return;
    }
    conn_send(c, &w);
    if (c->who.state == NODE_PRINCIPAL_DONE) {
        node_log(NODE_LOG_DEBUG, "client authenticated",
                 "conn=%llu user=%s namespace=%s", (unsigned long long)c->id,
                 c->who.user, c->who.ns[0] != '\0' ? c->who.ns : "default");
    }
}

static bool op_has_queue(uint8_t op)
{
    return op == PROTO_OP_SHARED_CONFIG || op == PROTO_OP_RECEIVE ||
           op == PROTO_OP_SETTLE || op == PROTO_OP_CLAIM ||
           op == PROTO_OP_QUEUE_CREATE || op == PROTO_OP_QUEUE_DELETE ||
           op == PROTO_OP_PRODUCE || op == PROTO_OP_FETCH ||
           op == PROTO_OP_GROUP_FETCH || op == PROTO_OP_GROUP_COMMIT ||
           op == PROTO_OP_QUEUE_UPDATE || op == PROTO_OP_QUEUE_INFO ||
           op == PROTO_OP_OFFSET_FOR_TIME || op == PROTO_OP_MESSAGE_GET ||
           op == PROTO_OP_MESSAGE_TRACE || op == PROTO_OP_PRODUCE_DELAYED ||
           op == PROTO_OP_GROUP_STATUS;
}

/* QUEUE_INFO and OFFSET_FOR_TIME (docs/MESSAGES.md): served from this
 * node's index, as FETCH. queue is the stored name. */
static void serve_queue_read(struct node_conn *c,
                             uint64_t request_id,
                             const struct proto_request *r,
                             const char *queue)
{
    struct idx_env *e = view_idx(&c->view);
    struct tern_wbuf w;
    int rv;
    if (e == NULL) {
        send_error(c, r->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    tern_wbuf_init(&w);
    if (r->op == PROTO_OP_QUEUE_INFO) {
        struct idx_queue_info qi;
        struct proto_queue_info_resp a;
        rv = idx_queue_get(e, queue, &qi);
        if (rv == 0) {
            memset(&a, 0, sizeof(a));
            a.start_offset = qi.start_offset;
            a.next_offset = qi.next_offset;
            a.bytes = qi.bytes;
            a.created_index = qi.created_index;
            a.settings.max_age_ms = qi.settings.max_age_ms;
            a.settings.max_bytes = qi.settings.max_bytes;
            a.settings.max_messages = qi.settings.max_messages;
            a.settings.overflow = (uint8_t)qi.settings.overflow;
            rv = proto_encode_queue_info_resp(&w, request_id, &a);
        }
    } else {
        uint64_t off = 0;
        rv = idx_offset_for_time(e, queue, r->time_ms, &off);
        if (rv == 0) {
            rv = proto_encode_offset_resp(&w, request_id, off);
        }
    }
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    conn_send(c, &w);
}

/* BACKUP (op 36, docs/OPERATIONS.md): node/backup.c runs the job off the
 * loop; the answer goes out when it ends, if the connection is still
 * open (the job holds a reference to it: struct conn_wait). */

static void backup_done(void *arg,
                        int status,
                        const struct idx_backup_info *info,
                        const char *errmsg)
{
    struct conn_wait *bw = arg;
    struct node_conn *c = bw->c;
    if (conn_live(c)) {
        if (status != 0) {
            send_error(c, PROTO_OP_BACKUP, bw->request_id, status, errmsg);
        } else {
            struct proto_backup_info b = {
                .cluster = info->cluster,
                .cluster_len = (uint16_t)strlen(info->cluster),
                .node_id = info->node_id,
                .term = info->term,
                .last_applied = info->last_applied,
                .log_start = info->log_start,
                .log_end = info->log_end,
                .n_files = info->n_files,
                .total_bytes = info->total_bytes,
                .created_ms = info->created_ms,
            };
            struct tern_wbuf w;
            tern_wbuf_init(&w);
            if (proto_encode_backup_resp(&w, bw->request_id, &b) != 0) {
                tern_wbuf_free(&w);
                send_error(c, PROTO_OP_BACKUP, bw->request_id, -ENOMEM, NULL);
            } else {
                conn_send(c, &w);
            }
        }
    }
    conn_wait_end(bw);
}

static void serve_backup(struct node_conn *c,
                         uint64_t request_id,
                         const struct proto_request *r)
{
    char dir[PROTO_BACKUP_PATH_MAX + 1];
    char m[TERN_ERRMSG_SIZE] = "";
    struct node_backup_source src = {c->view.ops.idx, c->view.ops.status,
                                     c->view.arg};
    struct conn_wait *bw = conn_wait_new(c, r->op, request_id, sizeof *bw);
    int rv;
    if (bw == NULL) {
        return;
    }
    memcpy(dir, r->path, r->path_len);
    dir[r->path_len] = '\0';
    rv = node_backup_start(c->srv->loop, &src, c->view.cfg, dir,
                           (r->flags & PROTO_BACKUP_VERIFY) != 0,
                           r->min_applied, backup_done, bw, m);
    if (rv != 0) {
        tern_free(bw);
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    c->refs++;
}

static void handle_request(struct node_conn *c,
                           uint64_t request_id,
                           const struct proto_request *req)
{
    char stored[TERN_NAME_MAX + 1];
    char group[PROTO_MAX_NAME + 1];
    char m[TERN_ERRMSG_SIZE];
    struct proto_request qr;
    const struct proto_request *r = req;
    int rv;

    if (c->srv != NULL) {
        node_metrics_request(c->srv->metrics, req->op);
    }
    if (req->op == PROTO_OP_AUTH_START || req->op == PROTO_OP_AUTH_CONTINUE) {
        serve_auth(c, request_id, req);
        return;
    }
    if (c->srv == NULL) {
        send_error(c, req->op, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    rv = node_access_check(c->srv->access, &c->who, view_idx(&c->view), req, m);
    if (rv != 0) {
        send_error(c, req->op, request_id, rv, m);
        return;
    }
    /* Names as the index stores them: qualified with the connection's
     * namespace; the producer-id owner is the connection's user. */
    if (op_has_queue(req->op) || req->op == PROTO_OP_PRODUCER_INIT) {
        qr = *req;
        r = &qr;
    }
    if (op_has_queue(req->op)) {
        if (c->who.ns[0] == '\0') {
            name_copy(stored, req->queue, req->queue_len);
        } else if ((rv = node_access_qualify(&c->who, req->queue,
                                             req->queue_len, stored, m)) != 0) {
            send_error(c, req->op, request_id, rv, m);
            return;
        }
        qr.queue = stored;
        qr.queue_len = (uint16_t)strlen(stored);
    } else if (req->op == PROTO_OP_PRODUCER_INIT) {
        qr.user = c->who.user;
        qr.user_len = (uint16_t)strlen(c->who.user);
    }

    if (req->op == PROTO_OP_GROUP_COMMIT) {
        /* Commits of a consumer are checked against the group's claim as
         * its own (GROUP_COMMIT_AS, docs/WORKQUEUES.md). */
        qr.consumer_id = c->consumer_id;
    }

    switch (r->op) {
    case PROTO_OP_CLAIM:
        name_copy(group, r->group, r->group_len);
        handle_claim(c, request_id, r, stored, group);
        break;
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_DELETE:
    case PROTO_OP_PRODUCE:
    case PROTO_OP_PRODUCE_DELAYED:
    case PROTO_OP_GROUP_COMMIT:
    case PROTO_OP_QUEUE_UPDATE:
    case PROTO_OP_SHARED_CONFIG:
    case PROTO_OP_SETTLE:
        handle_write(c, request_id, r);
        break;
    case PROTO_OP_RECEIVE:
        name_copy(group, r->group, r->group_len);
        handle_receive(c, request_id, r, stored, group);
        break;
    case PROTO_OP_QUEUE_INFO:
    case PROTO_OP_OFFSET_FOR_TIME:
        serve_queue_read(c, request_id, r, stored);
        break;
    case PROTO_OP_FETCH: {
        bool leader_only = (r->flags & PROTO_FETCH_LEADER) != 0;
        if (leader_only) {
            struct repl_status st;
            view_status(&c->view, &st);
            if (refuse_unless_writable(c, r->op, request_id, &st)) {
                break;
            }
        }
        struct node_fetch_filter ff;
        filter_from_req(r, &ff);
        serve_fetch(c, r->op, request_id, stored, "", r->offset, r->max_msgs,
                    r->max_bytes, r->wait_ms, leader_only, &ff,
                    answer_runs(c, r->op));
        break;
    }
    case PROTO_OP_MESSAGE_GET:
        serve_message_get(c, request_id, r, stored);
        break;
    case PROTO_OP_MESSAGE_TRACE:
        serve_message_trace(c, request_id, r, stored);
        break;
    case PROTO_OP_GROUP_STATUS:
        serve_group_status(c, request_id, r, stored);
        break;
    case PROTO_OP_GROUP_FETCH:
        name_copy(group, r->group, r->group_len);
        handle_group_fetch(c, request_id, r, stored, group);
        break;
    case PROTO_OP_QUEUE_LIST:
        serve_list(c, request_id, r);
        break;
    case PROTO_OP_STATUS:
        serve_status(c, request_id, r->flags);
        break;
    case PROTO_OP_HELLO:
        serve_hello(c, request_id, r->bits);
        break;
    case PROTO_OP_MEMBER:
        handle_member(c, request_id, r);
        break;
    case PROTO_OP_STATS:
        serve_stats(c, request_id, r->flags);
        break;
    case PROTO_OP_USER_SET:
    case PROTO_OP_USER_DELETE:
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
    case PROTO_OP_NAMESPACE_SET:
    case PROTO_OP_NAMESPACE_DELETE:
    case PROTO_OP_PRODUCER_INIT:
        handle_write(c, request_id, r);
        break;
    case PROTO_OP_USER_LIST:
    case PROTO_OP_ACL_LIST:
    case PROTO_OP_NAMESPACE_LIST:
        serve_security_list(c, request_id, r);
        break;
    case PROTO_OP_CLUSTER_TRANSFER:
        handle_transfer(c, request_id, r);
        break;
    case PROTO_OP_BACKUP:
        serve_backup(c, request_id, r);
        break;
    default:
        send_error(c, r->op, request_id, TERN_EINVAL, "unknown request op");
        break;
    }
}

static bool conn_may_process(const struct node_conn *c)
{
    return c->state == CONN_OPEN && !c->auth_wait &&
           !node_batcher_congested(c->view.batcher);
}

/* The answer a request may need, for conn_admit (serve_fetch then cuts a
 * FETCH to what is left). */
static size_t answer_estimate(const struct node_conn *c,
                              const struct proto_request *r)
{
    switch (r->op) {
    case PROTO_OP_FETCH:
    case PROTO_OP_GROUP_FETCH:
    case PROTO_OP_MESSAGE_GET:
        return SERVER__FETCH_MIN_ANSWER;
    case PROTO_OP_MESSAGE_TRACE:
    case PROTO_OP_GROUP_STATUS:
        return list_answer_cap(c->view.cfg, true);
    case PROTO_OP_QUEUE_LIST:
    case PROTO_OP_USER_LIST:
    case PROTO_OP_ACL_LIST:
    case PROTO_OP_NAMESPACE_LIST:
        return list_answer_cap(c->view.cfg, r->paged != 0);
    default:
        return SERVER__SMALL_ANSWER;
    }
}

/* Stop reading and answering (a fatal frame error or a limit): the
 * connection closes once its queued answers are written. */
static void conn_drain(struct node_conn *c)
{
    if (c->state != CONN_OPEN) {
        return;
    }
    cork_write(c);
    c->state = CONN_DRAINING;
    set_blocked(c, &c->paused, false);
    set_blocked(c, &c->mem_wait, false);
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (c->writes == 0 && c->jobs == 0) {
        conn_close(c);
    }
}

/* Answer a limit that ends the connection: TERN_ELIMIT, then close. */
static void conn_limit_close(struct node_conn *c, const char *message)
{
    send_error(c, PROTO_OP_ERROR, 0, TERN_ELIMIT, message);
    conn_drain(c);
}

/* After processing: size the read buffer for the partial frame left in
 * it (need: its whole size, 0 if its header is incomplete), or release
 * it; start the frame clock for a new partial frame. */
static void conn_after_process(struct node_conn *c, bool consumed, size_t need)
{
    const struct node_config *cfg = c->view.cfg;
    char m[TERN_ERRMSG_SIZE];
    int rv;

    if (c->rlen == 0) {
        c->frame_start_ms = 0;
        rbuf_trim(c);
        return;
    }
    if (consumed || c->frame_start_ms == 0) {
        c->frame_start_ms = conn_now(c);
    }
    if (c->paused || c->state != CONN_OPEN) {
        return;
    }
    if (need <= SERVER__READ_CHUNK) {
        rbuf_trim(c);
        return;
    }
    if (c->rcap >= need || c->rcap - c->rlen >= SERVER__READ_CHUNK / 2) {
        return;
    }
    /* Grow as the frame's bytes arrive (doubling, up to its size), so a
     * header alone does not take max_frame_bytes of the budget. */
    rv = rbuf_grow(
        c, TERN_MIN(need, TERN_MAX(c->rcap * 2, c->rlen + SERVER__READ_CHUNK)));
    if (rv == TERN_ELIMIT) {
        (void)snprintf(m, sizeof(m),
                       "client_memory_bytes (%llu) exhausted: no room to "
                       "read a frame of %zu bytes",
                       (unsigned long long)cfg->client_memory_bytes, need);
        node_log(NODE_LOG_WARN, "client frame refused, closing",
                 "conn=%llu need=%zu detail=\"%s\"", (unsigned long long)c->id,
                 need, m);
        conn_limit_close(c, m);
    } else if (rv != 0) {
        conn_limit_close(c, "out of memory reading a frame");
    }
}

/* Handle every complete frame in the read buffer, as long as each one's
 * answer fits in the memory bounds. */
static void conn_process(struct node_conn *c)
{
    size_t off = 0;
    size_t need = 0;
    uint32_t max_body = c->srv != NULL ? c->srv->max_body : 0;
    bool blocked = false;
    struct node_frame f;

    if (c->in_process) {
        return;
    }
    c->in_process = true;
    while (conn_may_process(c) && off < c->rlen) {
        node_frame_next(c->rbuf + off, c->rlen - off, max_body, &f);
        if (f.action == NODE_FRAME_NEED_MORE) {
            need = f.need;
            break;
        }
        if (f.action != NODE_FRAME_FATAL) {
            size_t est = f.action == NODE_FRAME_REQUEST
                             ? answer_estimate(c, &f.req)
                             : SERVER__SMALL_ANSWER;
            if (!conn_admit(c, est, f.consumed) && c->ahead2 != NULL) {
                struct fetch_job *b = c->ahead2;
                c->ahead2 = NULL;
                fetch_ahead_drop_one(b); /* its room, for a request asked */
            }
            if (!conn_admit(c, est, f.consumed) && c->ahead != NULL &&
                !c->ahead->claimed) {
                fetch_ahead_drop(c); /* its room, for a request asked */
            }
            if (!conn_admit(c, est, f.consumed)) {
                blocked = true;
                break;
            }
            if (c->paused) {
                c->progress_ms = conn_now(c);
            }
            c->last_request_ms = conn_now(c);
        }
        switch (f.action) {
        case NODE_FRAME_REQUEST:
            handle_request(c, f.request_id, &f.req);
            break;
        case NODE_FRAME_ERROR:
            node_log(NODE_LOG_DEBUG, "bad request",
                     "conn=%llu err=%s "
                     "detail=\"%s\"",
                     (unsigned long long)c->id, tern_err_name(f.status),
                     f.message);
            send_error(c, f.op, f.request_id, f.status, f.message);
            break;
        default:
            node_log(NODE_LOG_WARN, "bad frame, closing connection",
                     "conn=%llu err=%s detail=\"%s\"",
                     (unsigned long long)c->id, tern_err_name(f.status),
                     f.message);
            send_error(c, f.op, f.request_id, f.status, f.message);
            conn_drain(c);
            break;
        }
        off += f.consumed;
    }
    if (c->state == CONN_OPEN) {
        if (blocked && !c->paused) {
            c->progress_ms = conn_now(c);
        }
        set_blocked(c, &c->paused, blocked);
    }
    if (off > 0) {
        off = TERN_MIN(off, c->rlen);
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    conn_after_process(c, off > 0, need);
    c->in_process = false;
}

/* ---- Client TLS (ctls.c) -------------------------------------------------
 *
 * With client_tls on, libuv reads ciphertext into the server's tls_in
 * buffer (at most what the session takes: node_ctls_room), which is fed
 * to the session at once; plaintext is pulled from the session into the
 * read buffer only while it has room and the connection may process, so
 * every bound on the read buffer holds as without TLS and a stopped
 * connection leaves at most AUTH_TLS_BUF of ciphertext in its session
 * (then reading stops). Answers are sealed in conn_send. Each session is
 * charged NODE_CTLS_COST of client_memory_bytes. A handshake not done
 * within frame_timeout_ms of the accept closes the connection. */

/* Send what the session has pending (handshake messages, an alert). */
static void conn_tls_flush(struct node_conn *c)
{
    uint8_t *b = NULL;
    size_t n = 0;
    if (node_ctls_take(c->tls, &b, &n) != 0) {
        conn_close(c);
    } else if (b != NULL) {
        conn_write(c, b, n);
    }
}

/* Decrypted bytes into the read buffer, frames processed as they come. */
static void conn_tls_pull(struct node_conn *c)
{
    for (unsigned i = 0; i < 4096 && conn_may_process(c) && !c->paused &&
                         node_ctls_ready(c->tls);
         i++) {
        size_t n = 0;
        int rv;
        if (c->rcap == 0) {
            if (rbuf_grow(c, SERVER__READ_CHUNK) != 0) {
                set_blocked(c, &c->mem_wait, true);
                return;
            }
            set_blocked(c, &c->mem_wait, false);
        }
        if (c->rlen == c->rcap) {
            return;
        }
        rv = node_ctls_read(c->tls, c->rbuf + c->rlen, c->rcap - c->rlen, &n);
        if (rv != 0) {
            if (rv != TERN_ECLOSED) {
                node_log(NODE_LOG_DEBUG, "client TLS read failed",
                         "conn=%llu detail=\"%s\"", (unsigned long long)c->id,
                         node_ctls_errmsg(c->tls));
            }
            conn_close(c);
            return;
        }
        if (n == 0) {
            return;
        }
        c->rlen += n;
        conn_process(c);
    }
}

/* Ciphertext arrived in buf (nread > 0 bytes). */
static void conn_tls_input(struct node_conn *c, const uv_buf_t *buf, size_t n)
{
    struct node_server *s = c->srv;
    bool was_ready = node_ctls_ready(c->tls);
    unsigned dropped = 0;
    int rv = node_ctls_feed(c->tls, buf->base, n);
    bool plain = node_ctls_plaintext(c->tls);

    if (rv == 0 || !plain) {
        conn_tls_flush(c); /* a plaintext client gets nothing back */
    }
    if (rv != 0) {
        if (s != NULL) {
            s->tls_failed++;
            s->tls_plaintext += plain ? 1 : 0;
            if (log_limit_ok(&s->log_tls, conn_now(c), &dropped)) {
                struct in_addr in;
                char addr[INET_ADDRSTRLEN] = "?";
                in.s_addr = c->peer_ip;
                (void)inet_ntop(AF_INET, &in, addr, sizeof(addr));
                node_log(NODE_LOG_WARN,
                         plain ? "plaintext client on the TLS client port, "
                                 "closing"
                               : "client TLS handshake failed, closing",
                         "conn=%llu addr=%s failed=%llu plaintext=%llu "
                         "suppressed=%u detail=\"%s\"",
                         (unsigned long long)c->id, addr,
                         (unsigned long long)s->tls_failed,
                         (unsigned long long)s->tls_plaintext, dropped,
                         node_ctls_errmsg(c->tls));
            }
        }
        conn_drain(c); /* closes once an alert is written */
        return;
    }
    if (!was_ready && node_ctls_ready(c->tls)) {
        const char *cn = node_ctls_peer_cn(c->tls);
        node_log(NODE_LOG_DEBUG, "client TLS established", "conn=%llu cn=%s",
                 (unsigned long long)c->id, cn[0] != '\0' ? cn : "-");
    }
    conn_tls_pull(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct node_conn *c = h->data;
    (void)suggested;
    if (c->tls != NULL) {
        size_t room = c->srv != NULL ? node_ctls_room(c->tls) : 0;
        *buf = uv_buf_init(room > 0 ? (char *)c->srv->tls_in : NULL,
                           (unsigned)TERN_MIN(room, AUTH_TLS_BUF));
        return;
    }
    if (c->rcap == 0) {
        if (rbuf_grow(c, SERVER__READ_CHUNK) != 0) {
            /* No room in the budget: wait for memory (on_read). */
            set_blocked(c, &c->mem_wait, true);
            *buf = uv_buf_init(NULL, 0);
            return;
        }
        set_blocked(c, &c->mem_wait, false);
    }
    *buf =
        uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct node_conn *c = stream->data;
    (void)buf;
    if (nread == 0) {
        return;
    }
    if (nread == UV_ENOBUFS && (c->mem_wait || c->tls != NULL)) {
        uv_read_stop(stream);
        c->reading = false;
        return;
    }
    if (nread < 0) {
        if (nread != UV_EOF) {
            node_log(NODE_LOG_DEBUG, "client read failed", "conn=%llu err=%s",
                     (unsigned long long)c->id, uv_strerror((int)nread));
        }
        conn_close(c);
        return;
    }
    if (c->tls != NULL) {
        conn_tls_input(c, buf, (size_t)nread);
    } else {
        c->rlen += (size_t)nread;
        conn_process(c);
    }
    conn_update_reading(c);
}

static void conn_update_reading(struct node_conn *c)
{
    bool want;
    if (c->in_process) {
        return;
    }
    if (conn_may_process(c) && (c->paused || (!c->reading && c->rlen > 0))) {
        /* Frames left in the buffer while paused come first. */
        conn_process(c);
    }
    if (c->tls != NULL) {
        conn_tls_pull(c); /* then plaintext the session holds */
    }
    want = conn_may_process(c) && !c->paused &&
           (c->tls == NULL || node_ctls_room(c->tls) > 0);
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) {
            c->reading = true;
        } else {
            conn_close(c);
        }
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* Memory was released: retry the connections stopped on a bound. */
static void wake_blocked(struct node_server *s)
{
    struct tern_list *l;
    if (s->waking) {
        return;
    }
    s->waking = true;
    l = s->conns.next;
    while (l != &s->conns && s->n_blocked > 0) {
        struct node_conn *c = TERN_CONTAINER(l, struct node_conn, link);
        l = l->next;
        if (c->paused || c->mem_wait) {
            conn_update_reading(c);
        }
    }
    s->waking = false;
}

void node_server_set_metrics(struct node_server *s, struct node_metrics *m)
{
    s->metrics = m;
}

void node_server_update_reading(struct node_server *s)
{
    struct tern_list *l = s->conns.next;
    while (l != &s->conns) {
        struct node_conn *c = TERN_CONTAINER(l, struct node_conn, link);
        l = l->next;
        conn_update_reading(c);
    }
}

/* ---- Timeouts ------------------------------------------------------------ */

static void log_closed(struct node_server *s,
                       const struct node_conn *c,
                       uint64_t now,
                       const char *why)
{
    unsigned dropped = 0;
    if (log_limit_ok(&s->log_closed, now, &dropped)) {
        node_log(NODE_LOG_WARN, "closing client connection",
                 "conn=%llu reason=%s queued=%zu suppressed=%u",
                 (unsigned long long)c->id, why, c->queued, dropped);
    }
}

/* One connection against the clock (see the header comment). */
static void conn_sweep(struct node_server *s, struct node_conn *c, uint64_t now)
{
    const struct node_config *cfg = c->view.cfg;
    char m[TERN_ERRMSG_SIZE];

    if (!conn_live(c)) {
        return;
    }
    fetch_ahead_sweep(c, now);
    if ((c->queued > 0 || c->paused) &&
        now - c->progress_ms >= cfg->slow_reader_timeout_ms) {
        log_closed(s, c, now, "slow_reader_timeout_ms");
        if (c->queued == 0 && c->state == CONN_OPEN) {
            (void)snprintf(m, sizeof(m),
                           "slow_reader_timeout_ms (%u): no room to answer "
                           "within client_memory_bytes (%llu)",
                           cfg->slow_reader_timeout_ms,
                           (unsigned long long)cfg->client_memory_bytes);
            conn_limit_close(c, m);
        } else {
            conn_close(c);
        }
        return;
    }
    if (c->state != CONN_OPEN) {
        return;
    }
    if (c->tls != NULL && !node_ctls_ready(c->tls) &&
        now - c->last_request_ms >= cfg->frame_timeout_ms) {
        log_closed(s, c, now, "frame_timeout_ms (TLS handshake)");
        conn_close(c);
        return;
    }
    if (!c->paused && c->frame_start_ms != 0 &&
        now - c->frame_start_ms >= cfg->frame_timeout_ms) {
        log_closed(s, c, now, "frame_timeout_ms");
        (void)snprintf(m, sizeof(m),
                       "frame_timeout_ms (%u): a frame was not completed "
                       "in time",
                       cfg->frame_timeout_ms);
        conn_limit_close(c, m);
        return;
    }
    if (cfg->idle_timeout_ms > 0 && c->rlen == 0 && c->queued == 0 &&
        c->n_parked == 0 && c->refs == 1 &&
        now - c->last_request_ms >= cfg->idle_timeout_ms) {
        (void)snprintf(m, sizeof(m),
                       "idle_timeout_ms (%u): no request in time, closing",
                       cfg->idle_timeout_ms);
        node_log(NODE_LOG_DEBUG, "closing idle client connection", "conn=%llu",
                 (unsigned long long)c->id);
        conn_limit_close(c, m);
    }
}

static void on_sweep_timer(uv_timer_t *t)
{
    struct node_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    struct tern_list *l = s->conns.next;
    while (l != &s->conns) {
        struct node_conn *c = TERN_CONTAINER(l, struct node_conn, link);
        l = l->next;
        conn_sweep(s, c, now);
    }
}

/* The sweep period: a quarter of the shortest timeout, 10 ms..1 s. */
static uint64_t sweep_period(const struct node_config *cfg)
{
    uint64_t t = TERN_MIN(cfg->frame_timeout_ms, cfg->slow_reader_timeout_ms);
    if (cfg->idle_timeout_ms > 0) {
        t = TERN_MIN(t, cfg->idle_timeout_ms);
    }
    return TERN_MAX(TERN_MIN(t / 4, 1000), 10);
}

/* ---- Connections and listener -------------------------------------------- */

static void server_handle_closed(struct node_server *s)
{
    if (--s->open_handles == 0 && s->closing) {
        void (*cb)(void *) = s->close_cb;
        void *arg = s->close_arg;
        auth_tls_ctx_free(s->tls_ctx);
        node_access_free(s->access);
        tern_free(s->tls_in);
        tern_free(s);
        if (cb != NULL) {
            cb(arg);
        }
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    struct node_conn *c = h->data;
    struct node_server *s = c->srv;
    c->state = CONN_CLOSED;
    set_blocked(c, &c->paused, false);
    set_blocked(c, &c->mem_wait, false);
    mem_sub(c, c->rcap);
    tern_free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
    c->rlen = 0;
    if (c->tls != NULL) {
        node_ctls_free(c->tls);
        c->tls = NULL;
        mem_sub(c, NODE_CTLS_COST);
    }
    if (s != NULL) {
        for (unsigned i = 0; i < c->n_shared; i++) {
            for (; c->shared[i].delivering > 0; c->shared[i].delivering--) {
                delivering_note(s, c->shared[i].queue, c->shared[i].group, -1);
            }
        }
        tern_list_remove(&c->link);
        s->n_conns--;
        node_metrics_conn(s->metrics, false);
        c->srv = NULL;
        node_log(NODE_LOG_DEBUG, "client disconnected", "conn=%llu",
                 (unsigned long long)c->id);
    }
    conn_unref(c);
    if (s != NULL) {
        if (!s->closing && s->n_blocked > 0) {
            wake_blocked(s); /* its memory is free now */
        }
        server_handle_closed(s); /* may free s */
    }
}

static void conn_close(struct node_conn *c)
{
    if (c->state == CONN_CLOSING || c->state == CONN_CLOSED) {
        return;
    }
    cork_write(c); /* what it answered before the close, as uncorked */
    fetch_ahead_drop(c);
    c->state = CONN_CLOSING;
    c->reading = false;
    release_leases(c);
    release_claims(c);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Refuse an accepted socket: one TERN_ELIMIT error frame if the socket
 * takes it at once (not on a TLS port), then close. */
static void refuse_fd(struct node_server *s,
                      int fd,
                      uint32_t ip,
                      const char *message)
{
    struct tern_wbuf w;
    unsigned dropped = 0;
    char addr[INET_ADDRSTRLEN] = "?";

    tern_wbuf_init(&w);
    /* A TLS client could not read a plaintext frame: it only sees the
     * close (and retries). */
    if (s->tls_ctx == NULL &&
        proto_encode_error(&w, PROTO_OP_ERROR, 0, TERN_ELIMIT, message, 0,
                           "") == 0 &&
        w.err == 0) {
        (void)send(fd, w.base, w.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    tern_wbuf_free(&w);
    (void)shutdown(fd, SHUT_WR);
    (void)close(fd);
    if (log_limit_ok(&s->log_refused, uv_now(s->loop), &dropped)) {
        struct in_addr in;
        in.s_addr = ip;
        (void)inet_ntop(AF_INET, &in, addr, sizeof(addr));
        node_log(NODE_LOG_WARN, "client connection refused",
                 "addr=%s conns=%u suppressed=%u detail=\"%s\"", addr,
                 s->n_conns, dropped, message);
    }
}

/* Take over the accepted socket fd from ip, or refuse it. */
static void accept_fd(struct node_server *s, int fd, uint32_t ip)
{
    const struct node_config *cfg = s->view.cfg;
    struct node_conn *c;
    char m[TERN_ERRMSG_SIZE];
    unsigned same = 0;
    struct tern_list *l;

    if (s->n_conns >= s->max_conns) {
        (void)snprintf(m, sizeof(m),
                       "max_connections (%u) reached: connection refused",
                       s->max_conns);
        refuse_fd(s, fd, ip, m);
        return;
    }
    for (l = s->conns.next; l != &s->conns; l = l->next) {
        if (TERN_CONTAINER(l, struct node_conn, link)->peer_ip == ip) {
            same++;
        }
    }
    if (same >= cfg->max_connections_per_addr) {
        (void)snprintf(m, sizeof(m),
                       "max_connections_per_addr (%u) reached for this "
                       "address: connection refused",
                       cfg->max_connections_per_addr);
        refuse_fd(s, fd, ip, m);
        return;
    }
    if (s->tls_ctx != NULL &&
        s->mem_used + NODE_CTLS_COST > cfg->client_memory_bytes) {
        (void)snprintf(m, sizeof(m),
                       "client_memory_bytes (%llu) exhausted: no room for a "
                       "TLS session, connection refused",
                       (unsigned long long)cfg->client_memory_bytes);
        refuse_fd(s, fd, ip, m);
        return;
    }
    c = tern_calloc(1, sizeof(*c));
    if (c == NULL) {
        refuse_fd(s, fd, ip, "out of memory: connection refused");
        return;
    }
    if (s->tls_ctx != NULL && node_ctls_new(s->tls_ctx, &c->tls) != 0) {
        tern_free(c);
        refuse_fd(s, fd, ip, "out of memory: connection refused");
        return;
    }
    if (uv_tcp_init(s->loop, &c->tcp) != 0) {
        node_ctls_free(c->tls);
        tern_free(c);
        refuse_fd(s, fd, ip, "cannot set up the connection");
        return;
    }
    c->tcp.data = c;
    c->srv = s;
    c->view = s->view;
    c->refs = 1;
    c->id = ++s->next_conn_id;
    c->peer_ip = ip;
    c->last_request_ms = uv_now(s->loop);
    c->rmax = PROTO_HEADER_SIZE + (size_t)s->max_body + SERVER__READ_CHUNK;
    if (c->tls != NULL) {
        mem_add(c, NODE_CTLS_COST);
    }
    tern_list_push(&s->conns, &c->link);
    s->n_conns++;
    node_metrics_conn(s->metrics, true);
    s->open_handles++;
    if (uv_tcp_open(&c->tcp, fd) != 0) {
        (void)close(fd);
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    node_log(NODE_LOG_DEBUG, "client connected", "conn=%llu",
             (unsigned long long)c->id);
    conn_update_reading(c);
}

static void on_listen(uv_poll_t *h, int status, int events);

static void on_accept_timer(uv_timer_t *t)
{
    struct node_server *s = t->data;
    if (!s->closing) {
        (void)uv_poll_start(&s->listener, UV_READABLE, on_listen);
    }
}

static void on_listen(uv_poll_t *h, int status, int events)
{
    struct node_server *s = h->data;
    (void)events;
    for (int i = 0; i < SERVER__ACCEPT_BATCH && status == 0 && !s->closing;
         i++) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        unsigned dropped = 0;
        memset(&sa, 0, sizeof(sa));
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accept_fd(s, fd, sa.sin_family == AF_INET ? sa.sin_addr.s_addr : 0);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        }
        if (errno == EINTR || errno == ECONNABORTED) {
            continue;
        }
        /* EMFILE, ENFILE, ENOMEM, ENOBUFS...: pause accepting. */
        if (log_limit_ok(&s->log_accept, uv_now(s->loop), &dropped)) {
            node_log(NODE_LOG_WARN, "accept failed, pausing accepts",
                     "err=%s conns=%u backoff_ms=%d suppressed=%u",
                     strerror(errno), s->n_conns, SERVER__ACCEPT_BACKOFF_MS,
                     dropped);
        }
        (void)uv_poll_stop(&s->listener);
        uv_timer_start(&s->accept_timer, on_accept_timer,
                       SERVER__ACCEPT_BACKOFF_MS, 0);
        return;
    }
    if (status != 0) {
        node_log(NODE_LOG_WARN, "client listener error", "err=%s",
                 uv_strerror(status));
    }
}

static void on_server_handle_closed(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

static void on_listener_closed(uv_handle_t *h)
{
    struct node_server *s = h->data;
    (void)close(s->listen_fd);
    s->listen_fd = -1;
    server_handle_closed(s);
}

/* A non-blocking listening socket on sa. 0 with *fd, or -errno. */
static int listen_socket(const struct sockaddr_in *sa, int *fd)
{
    int one = 1;
    int rv;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
        return -errno;
    }
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(s, (const struct sockaddr *)sa, sizeof(*sa)) != 0 ||
        listen(s, SERVER__LISTEN_BACKLOG) != 0) {
        rv = -errno;
        (void)close(s);
        return rv;
    }
    *fd = s;
    return 0;
}

int node_server_new(uv_loop_t *loop,
                    const struct node_config *cfg,
                    struct node_batcher *batcher,
                    const struct node_server_ops *ops,
                    void *arg,
                    struct node_server **out,
                    char *errmsg)
{
    const char *addr = cfg->client_addr;
    struct node_server *s;
    struct sockaddr_in sa;
    char host[64];
    const char *colon = strrchr(addr, ':');
    struct auth_tls_ctx *tls_ctx = NULL;
    struct node_access *access = NULL;
    int fd = -1;
    int rv;

    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        tern_errmsg_printf(errmsg, "bad address '%s'", addr);
        return TERN_EINVAL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    rv = uv_ip4_addr(host, atoi(colon + 1), &sa);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "bad address '%s': %s", addr,
                           uv_strerror(rv));
        return TERN_EINVAL;
    }
    rv = node_ctls_ctx_new(cfg, &tls_ctx, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = node_access_new(cfg, cfg->cluster_secret, &access, errmsg);
    if (rv != 0) {
        auth_tls_ctx_free(tls_ctx);
        return rv;
    }
    rv = listen_socket(&sa, &fd);
    if (rv != 0) {
        auth_tls_ctx_free(tls_ctx);
        node_access_free(access);
        tern_errmsg_printf(errmsg, "listen on %s: %s", addr, strerror(-rv));
        return rv;
    }
    s = tern_calloc(1, sizeof(*s));
    if (s != NULL && tls_ctx != NULL) {
        s->tls_in = tern_malloc(AUTH_TLS_BUF);
        if (s->tls_in == NULL) {
            tern_free(s);
            s = NULL;
        }
    }
    if (s == NULL) {
        (void)close(fd);
        auth_tls_ctx_free(tls_ctx);
        node_access_free(access);
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    s->tls_ctx = tls_ctx;
    s->access = access;
    s->view.ops = *ops;
    s->view.arg = arg;
    s->view.cfg = cfg;
    s->view.batcher = batcher;
    s->loop = loop;
    s->max_body = (uint32_t)cfg->max_frame_bytes;
    s->max_conns = cfg->max_connections;
    s->listen_fd = fd;
    tern_list_init(&s->conns);
    tern_list_init(&s->parked);
    tern_list_init(&s->corked_conns);
    rv = uv_poll_init(loop, &s->listener, fd);
    if (rv != 0) {
        (void)close(fd);
        auth_tls_ctx_free(tls_ctx);
        node_access_free(access);
        tern_free(s->tls_in);
        tern_free(s);
        tern_errmsg_printf(errmsg, "listen on %s: %s", addr, uv_strerror(rv));
        return rv;
    }
    s->listener.data = s;
    uv_timer_init(loop, &s->park_timer);
    s->park_timer.data = s;
    uv_timer_init(loop, &s->sweep_timer);
    s->sweep_timer.data = s;
    uv_timer_init(loop, &s->accept_timer);
    s->accept_timer.data = s;
    uv_timer_init(loop, &s->auth_timer);
    s->auth_timer.data = s;
    tern_list_init(&s->auth_waits);
    s->open_handles = 5;
    rv = uv_poll_start(&s->listener, UV_READABLE, on_listen);
    if (rv == 0) {
        uint64_t period = sweep_period(cfg);
        rv = uv_timer_start(&s->sweep_timer, on_sweep_timer, period, period);
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "listen on %s: %s", addr, uv_strerror(rv));
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        uv_close((uv_handle_t *)&s->park_timer, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->sweep_timer, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->accept_timer, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->auth_timer, on_server_handle_closed);
        return rv;
    }
    *out = s;
    return 0;
}

void node_server_close(struct node_server *s, void (*cb)(void *arg), void *arg)
{
    struct tern_list *l;
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    while (!tern_list_empty(&s->parked)) {
        parked_free(s, TERN_CONTAINER(s->parked.next, struct parked, link));
    }
    uv_timer_stop(&s->park_timer);
    /* Delayed failed logins end now, unanswered: their connections close
     * with every other. */
    while (!tern_list_empty(&s->auth_waits)) {
        struct auth_wait *w =
            TERN_CONTAINER(s->auth_waits.next, struct auth_wait, link);
        tern_list_remove(&w->link);
        w->c->auth_wait = false;
        conn_unref(w->c);
        tern_free(w);
    }
    for (l = s->conns.next; l != &s->conns; l = l->next) {
        conn_close(TERN_CONTAINER(l, struct node_conn, link));
    }
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    uv_close((uv_handle_t *)&s->park_timer, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->sweep_timer, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->accept_timer, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->auth_timer, on_server_handle_closed);
}
