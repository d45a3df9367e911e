/*
 * libtern request engine and public calls.
 *
 * Every call, sync or async, becomes a request (struct tern__req) on the
 * client's list, kept in creation order. One engine step (step()) expires
 * requests past their deadline, sends queued requests to their target
 * server, polls the sockets, and dispatches responses by request id.
 * Synchronous calls run steps until their own request is done; async
 * produce batches complete inside tern_client_poll. No threads.
 *
 * Happy path: a request is encoded once into its own frame buffer; each
 * send attempt gets a fresh request id (patched into the frame), so a late
 * answer to an abandoned attempt never matches. The response completes the
 * request; a write's success confirms its server as the leader.
 *
 * Failure modes:
 *   - connection error / close / bad frame from a server: the connection is
 *     closed with a back-off before reconnecting, every request in flight on
 *     it is re-queued (with its back-off), and if it was the leader guess
 *     the guess moves to the next server;
 *   - TERN_ENOTLEADER: the leader guess becomes the hinted address (added to
 *     the server list if new), or the next server; the request is re-queued;
 *   - TERN_ENOLEADER, ESHUTDOWN, EBUSY, ENOCONN, ELEADERSHIPLOST: re-queued
 *     with back-off (produce is idempotent, so an ambiguous outcome is safe
 *     to retry);
 *   - the deadline passes: TERN_ETIMEDOUT (outcome unknown).
 *
 * Async window: an async batch is admitted to the window (max_in_flight)
 * in list order and stays admitted across retries until it completes; its
 * deadline starts at admission.
 *
 * Produce ordering (invariant): batches of one queue carry consecutive
 * sequence numbers (per queue state struct tern__pq) in list order, and a
 * batch is only sent when every earlier batch of its queue is on the wire
 * or done. When one batch must be retried, every later batch of the same
 * queue that is on the wire is taken back too ("rewind"), so the resend is
 * again in sequence order; the server deduplicates whatever it had already
 * appended (same producer id and sequence -> original offsets). A
 * TERN_ESEQUENCE answer (the server saw a gap: an earlier batch has not
 * reached this leader yet) rewinds the queue from its oldest outstanding
 * batch. If a batch times out, its outcome is unknown and a gap may stay
 * forever. Later batches of the queue then get TERN_ESEQUENCE at their
 * oldest, which proves none of them was appended: they are renumbered from
 * 1 under a fresh producer id for that queue (pq_renumber) and resent. The
 * same recovers from a batch that failed for good (TERN_ENOQUEUE, ...).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "client_int.h"

#define TERN__DEFAULT_CONNECT_TIMEOUT_MS 1000
#define TERN__DEFAULT_REQUEST_TIMEOUT_MS 5000
#define TERN__DEFAULT_BACKOFF_MS         25
#define TERN__DEFAULT_WINDOW             32
#define TERN__MAX_SEQUENCE_RETRIES       5
#define TERN__FETCH_MAX_BYTES_DEFAULT    (1u << 20)

enum tern__req_state {
    TERN__REQ_QUEUED = 0,
    TERN__REQ_SENT,
    TERN__REQ_DONE,
};

/* Per-queue producer state. */
struct tern__pq
{
    struct tern__pq *next;
    char *queue; /* owned */
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
};

struct tern__req
{
    struct tern__req *prev;
    struct tern__req *next;
    uint8_t op;
    int leader_only; /* only a writable leader answers it: a leader_only_op,
                        or a READ_LEADER fetch (PROTO_FETCH_LEADER) */
    int is_async;
    int admitted; /* async: inside the window (its deadline runs) */
    int target;   /* fixed server index, or -1: chosen by the rules */
    enum tern__req_state state;
    uint64_t id;     /* current attempt's request id; 0 when not on the wire */
    int srv;         /* server index while SENT */
    int answered_by; /* server index of the successful answer */
    int attempts;
    int ever_sent;
    int seq_errors;
    int64_t deadline;
    int64_t not_before;
    struct tern_wbuf frame; /* owned */
    struct tern__pq *pq;    /* produce only (NULL for a resend) */
    struct tern__pq *resend_of; /* tern_produce_resend: whose unknown */
    uint64_t pid;           /* produce: producer id in the frame */
    uint64_t seq;
    uint32_t msg_sum;       /* produce: batch_checksum of the messages */
    size_t n_msgs;
    /* Outcome. */
    int status;
    char errmsg[TERN_ERRMSG_SIZE]; /* last failure seen */
    uint8_t *body;                 /* owned copy of the response body */
    size_t body_len;
    struct proto_produce_resp produce;
    tern_produce_cb cb;
    void *arg;
    struct tern__req *done_next; /* async completions to fire */
};

struct tern_client
{
    struct tern_client_options opts;
    struct tern__server **servers; /* owned */
    int n_servers;
    int leader; /* index of the leader guess */
    int leader_confirmed;
    int read_cur; /* READ_ANY: current read server */
    uint64_t producer_id;
    uint64_t next_id;
    struct tern__req *head; /* not-done requests, creation order */
    struct tern__req *tail;
    struct tern__pq *pqs;
    size_t async_pending;        /* async requests not completed */
    size_t async_admitted;       /* async requests admitted to the window */
    struct tern__req *done_head; /* completed async, callbacks not fired */
    struct tern__req *done_tail;
    int in_callback;
    int closing; /* inside tern_client_free */
    int round;   /* pump round, for per-queue blocking */
    struct pollfd *pfds;
    char errmsg[TERN_ERRMSG_SIZE];
    char leader_addr[TERN_ERRMSG_SIZE];
};

/* ---- Small helpers ---- */

int tern_version_number(void)
{
    return TERN_VERSION_NUMBER;
}

void tern_client_options_init(struct tern_client_options *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = TERN__DEFAULT_CONNECT_TIMEOUT_MS;
    o->request_timeout_ms = TERN__DEFAULT_REQUEST_TIMEOUT_MS;
    o->retry_backoff_ms = TERN__DEFAULT_BACKOFF_MS;
    o->max_in_flight = TERN__DEFAULT_WINDOW;
    o->read_from = TERN_READ_LEADER;
    o->max_frame = PROTO_DEFAULT_MAX_BODY;
}

static uint64_t random_id(void)
{
    uint64_t id = 0;
    while (id == 0) {
        if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) {
            /* getrandom cannot fail for 8 bytes once the pool is ready;
             * fall back to time and address bits anyway. */
            id = (uint64_t)tern__now_ms() * 0x9E3779B97F4A7C15ULL ^
                 (uint64_t)(uintptr_t)&id;
        }
    }
    return id;
}

static int64_t backoff_ms(const struct tern_client *c, int attempts)
{
    int shift = attempts <= 1 ? 0 : TERN_MIN(attempts - 1, 4);
    return (int64_t)c->opts.retry_backoff_ms << shift;
}

/* Ops only the leader serves, whatever read_from says: the writes, and
 * GROUP_FETCH (the server answers it behind a read barrier in the raft log,
 * so a consumer never starts below an offset its group committed). */
static int leader_only_op(uint8_t op)
{
    return op == PROTO_OP_QUEUE_CREATE || op == PROTO_OP_QUEUE_DELETE ||
           op == PROTO_OP_PRODUCE || op == PROTO_OP_GROUP_COMMIT ||
           op == PROTO_OP_GROUP_FETCH;
}

static int find_server(const struct tern_client *c,
                       const char *addr,
                       size_t len)
{
    for (int i = 0; i < c->n_servers; i++) {
        if (strlen(c->servers[i]->addr) == len &&
            memcmp(c->servers[i]->addr, addr, len) == 0) {
            return i;
        }
    }
    return -1;
}

/* Index of addr, adding it to the list if new; -1 if unusable. */
static int find_or_add_server(struct tern_client *c,
                              const char *addr,
                              size_t len)
{
    int i = find_server(c, addr, len);
    struct tern__server *s;
    struct tern__server **v;
    struct pollfd *p;
    if (i >= 0) {
        return i;
    }
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        return -1;
    }
    if (tern__server_init(s, addr, len) != 0) {
        tern_free(s);
        return -1;
    }
    v = tern_realloc(
        c->servers, (size_t)(c->n_servers + 1) * sizeof(struct tern__server *));
    if (v == NULL) {
        goto err;
    }
    c->servers = v;
    p = tern_realloc(c->pfds,
                     (size_t)(c->n_servers + 1) * sizeof(struct pollfd));
    if (p == NULL) {
        goto err;
    }
    c->pfds = p;
    c->servers[c->n_servers] = s;
    return c->n_servers++;

err:
    tern__server_free(s);
    tern_free(s);
    return -1;
}

/* ---- Request list ---- */

static void list_append(struct tern_client *c, struct tern__req *r)
{
    r->prev = c->tail;
    r->next = NULL;
    if (c->tail != NULL) {
        c->tail->next = r;
    } else {
        c->head = r;
    }
    c->tail = r;
}

static void list_remove(struct tern_client *c, struct tern__req *r)
{
    if (r->prev != NULL) {
        r->prev->next = r->next;
    } else {
        c->head = r->next;
    }
    if (r->next != NULL) {
        r->next->prev = r->prev;
    } else {
        c->tail = r->prev;
    }
    r->prev = r->next = NULL;
}

static void req_free(struct tern__req *r)
{
    if (r == NULL) {
        return;
    }
    tern_wbuf_free(&r->frame);
    tern_free(r->body);
    tern_free(r);
}

/* Take r off the wire (its answer, if any, will be ignored). */
static void req_detach(struct tern_client *c, struct tern__req *r)
{
    if (r->state == TERN__REQ_SENT) {
        r->state = TERN__REQ_QUEUED;
        r->id = 0;
        r->srv = -1;
    }
}

/* Remember or forget the batch with an unknown outcome (resend rules in
 * <tern/tern.h>, tern_produce_resend). */
static void note_produce_outcome(struct tern__req *r, int status)
{
    struct tern__pq *pq = r->pq != NULL ? r->pq : r->resend_of;
    if (r->op != PROTO_OP_PRODUCE || pq == NULL) {
        return;
    }
    if (status == TERN_ETIMEDOUT) {
        pq->unknown_valid = 1;
        pq->unknown_pid = r->pid;
        pq->unknown_seq = r->seq;
        pq->unknown_n = r->n_msgs;
        pq->unknown_sum = r->msg_sum;
    } else if (r->resend_of != NULL && pq->unknown_valid &&
               pq->unknown_pid == r->pid && pq->unknown_seq == r->seq) {
        pq->unknown_valid = 0; /* resolved: appended once, or never */
    }
}

static void req_complete(struct tern_client *c, struct tern__req *r, int status)
{
    note_produce_outcome(r, status);
    req_detach(c, r);
    if (r->admitted) {
        r->admitted = 0;
        c->async_admitted--;
    }
    list_remove(c, r);
    r->state = TERN__REQ_DONE;
    r->status = status;
    if (r->is_async) {
        r->done_next = NULL;
        if (c->done_tail != NULL) {
            c->done_tail->done_next = r;
        } else {
            c->done_head = r;
        }
        c->done_tail = r;
    }
}

/* Fire callbacks of completed async requests; returns how many. */
static int fire_completions(struct tern_client *c)
{
    int n = 0;
    while (c->done_head != NULL) {
        struct tern__req *r = c->done_head;
        c->done_head = r->done_next;
        if (c->done_head == NULL) {
            c->done_tail = NULL;
        }
        c->async_pending--;
        if (r->status != 0) {
            /* The callback may read the detail. */
            tern_errmsg_printf(c->errmsg, "%s", r->errmsg);
        }
        c->in_callback++;
        r->cb(r->arg, r->status, r->status == 0 ? r->produce.base_offset : 0,
              r->status == 0 ? r->produce.count : 0);
        c->in_callback--;
        req_free(r);
        n++;
    }
    return n;
}

/* Re-queue every on-the-wire produce of pq with seq >= from_seq. */
static void pq_rewind(struct tern_client *c,
                      struct tern__pq *pq,
                      uint64_t from_seq,
                      int64_t not_before)
{
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq && r->seq >= from_seq && r->state == TERN__REQ_SENT) {
            req_detach(c, r);
            r->not_before = TERN_MAX(r->not_before, not_before);
        }
    }
}

/* Put r back in the queue to be re-sent not before now + delay. */
static void req_retry(struct tern_client *c,
                      struct tern__req *r,
                      int64_t now,
                      int64_t delay)
{
    req_detach(c, r);
    r->not_before = now + delay;
    if (r->pq != NULL) {
        pq_rewind(c, r->pq, r->seq, r->not_before);
    }
}

static void leader_moved(struct tern_client *c, int from, int to)
{
    if (c->leader == from || from < 0) {
        c->leader = to;
    }
    c->leader_confirmed = 0;
}

static int next_server(const struct tern_client *c, int i)
{
    return (i + 1) % c->n_servers;
}

static int req_target(struct tern_client *c, const struct tern__req *r);

/* The connection to server i failed: close it, re-queue what was on it. */
static void server_fail(struct tern_client *c, int i, int code, int64_t now)
{
    struct tern__server *s = c->servers[i];
    tern__server_close(s);
    s->failures++;
    s->retry_after = now + backoff_ms(c, s->failures);
    if (s->errmsg[0] == '\0') {
        tern_errmsg_printf(s->errmsg, "%s: %s", s->addr, tern_strerror(code));
    }
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->state == TERN__REQ_SENT && r->srv == i) {
            tern_errmsg_printf(r->errmsg, "%s", s->errmsg);
            r->attempts++;
            req_retry(c, r, now, backoff_ms(c, r->attempts));
        } else if (r->state == TERN__REQ_QUEUED && req_target(c, r) == i) {
            /* Waiting for this connection: remember why it failed. */
            tern_errmsg_printf(r->errmsg, "%s", s->errmsg);
        }
    }
    if (c->leader == i) {
        leader_moved(c, i, next_server(c, i));
    }
    if (c->read_cur == i) {
        c->read_cur = next_server(c, i);
    }
}

/* ---- Produce sequence handling ---- */

static struct tern__pq *pq_get(struct tern_client *c, const char *queue)
{
    struct tern__pq *pq;
    for (pq = c->pqs; pq != NULL; pq = pq->next) {
        if (strcmp(pq->queue, queue) == 0) {
            return pq;
        }
    }
    pq = tern_calloc(1, sizeof *pq);
    if (pq == NULL) {
        return NULL;
    }
    pq->queue = tern_strdup(queue);
    if (pq->queue == NULL) {
        tern_free(pq);
        return NULL;
    }
    pq->producer_id = c->producer_id;
    pq->next_seq = 1;
    pq->next = c->pqs;
    c->pqs = pq;
    return pq;
}

/* The oldest outstanding batch of pq got TERN_ESEQUENCE: the server has a
 * gap before it (an earlier batch failed or timed out without being
 * appended), so none of the outstanding batches was appended either (the
 * server appends seq only after seq - 1). Renumber them all from 1 under a
 * fresh producer id for this queue and resend in order. */
static void pq_renumber(struct tern_client *c, struct tern__pq *pq)
{
    pq->producer_id = random_id();
    pq->next_seq = 1;
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq) {
            req_detach(c, r);
            r->seq = pq->next_seq++;
            r->pid = pq->producer_id;
            (void)proto_frame_set_producer(r->frame.base, r->frame.len,
                                           pq->producer_id, r->seq);
        }
    }
}

static struct tern__req *pq_oldest(struct tern_client *c,
                                   const struct tern__pq *pq)
{
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq) {
            return r;
        }
    }
    return NULL;
}

static void expire(struct tern_client *c, int64_t now)
{
    struct tern__req *r = c->head;
    while (r != NULL) {
        struct tern__req *next = r->next;
        if (r->deadline <= now) {
            char why[TERN_ERRMSG_SIZE];
            memcpy(why, r->errmsg, sizeof why);
            if (why[0] != '\0') {
                tern_errmsg_printf(r->errmsg,
                                   "no answer before the deadline "
                                   "(last error: %.180s)",
                                   why);
            } else {
                tern_errmsg_printf(r->errmsg, "no answer before the deadline");
            }
            req_complete(c, r, TERN_ETIMEDOUT);
        }
        r = next;
    }
}

/* ---- Sending ---- */

static int req_target(struct tern_client *c, const struct tern__req *r)
{
    if (r->target >= 0) {
        return r->target;
    }
    if (r->leader_only) {
        return c->leader;
    }
    switch (c->opts.read_from) {
    case TERN_READ_FIRST:
        return 0;
    case TERN_READ_ANY:
        return c->read_cur;
    default:
        return c->leader;
    }
}

/* Is server i ready to take frames? Starts a connection if due. */
static int server_ready(struct tern_client *c, int i, int64_t now)
{
    struct tern__server *s = c->servers[i];
    if (s->state == TERN__CONN_READY) {
        return 1;
    }
    if (s->state == TERN__CONN_CLOSED && now >= s->retry_after) {
        s->errmsg[0] = '\0';
        int rv = tern__server_connect(s, now, c->opts.connect_timeout_ms);
        if (rv != 0) {
            server_fail(c, i, rv, now);
            return 0;
        }
        return s->state == TERN__CONN_READY;
    }
    return 0;
}

/* Send what can be sent, in list order.
 * Window: an async batch is "admitted" when fewer than max_in_flight async
 * batches are admitted; it stays admitted, across retries, until it
 * completes. Its deadline starts at admission, so batches waiting behind a
 * full window do not time out before they had a chance to be sent. */
static void pump(struct tern_client *c, int64_t now)
{
    c->round++;
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        int sent = 0;
        if (r->state != TERN__REQ_QUEUED) {
            continue;
        }
        /* Per-queue order: a produce waits while an earlier batch of its
         * queue is still queued (blocked earlier in this round). */
        if (r->pq != NULL && r->pq->blocked_round == c->round) {
            continue;
        }
        if (r->is_async && !r->admitted &&
            c->async_admitted < (size_t)c->opts.max_in_flight) {
            r->admitted = 1;
            c->async_admitted++;
            r->deadline = now + c->opts.request_timeout_ms;
        }
        if (r->not_before <= now && (!r->is_async || r->admitted)) {
            int i = req_target(c, r);
            if (server_ready(c, i, now)) {
                struct tern__server *s = c->servers[i];
                r->id = ++c->next_id;
                (void)proto_frame_set_request_id(r->frame.base, r->frame.len,
                                                 r->id);
                tern_wbuf_put(&s->out, r->frame.base, r->frame.len);
                if (s->out.err != 0) {
                    /* ENOMEM: keep the request queued, try again later. */
                    s->out.err = 0;
                    r->id = 0;
                } else {
                    sent = 1;
                    r->state = TERN__REQ_SENT;
                    r->srv = i;
                    r->ever_sent = 1;
                }
            }
        }
        if (!sent && r->pq != NULL) {
            r->pq->blocked_round = c->round;
        }
    }
}

/* ---- Receiving ---- */

static int copy_body(struct tern__req *r, const uint8_t *body, size_t len)
{
    r->body = tern_malloc(len != 0 ? len : 1);
    if (r->body == NULL) {
        return -ENOMEM;
    }
    if (len != 0) {
        memcpy(r->body, body, len);
    }
    r->body_len = len;
    return 0;
}

static void on_success(struct tern_client *c,
                       struct tern__req *r,
                       int i,
                       const uint8_t *body,
                       size_t len)
{
    int rv = 0;
    r->answered_by = i;
    if (r->leader_only) {
        c->leader = i;
        c->leader_confirmed = 1;
    }
    switch (r->op) {
    case PROTO_OP_PRODUCE:
        rv = proto_decode_produce_resp(body, len, &r->produce);
        if (rv == 0 && !r->produce.duplicate && r->produce.count != r->n_msgs) {
            rv = TERN_EMALFORMED;
        }
        break;
    case PROTO_OP_FETCH:
    case PROTO_OP_GROUP_FETCH: {
        struct proto_fetch_resp fr;
        rv = proto_decode_fetch_resp(body, len, &fr);
        break;
    }
    case PROTO_OP_QUEUE_LIST: {
        struct proto_queue_list_resp ql;
        rv = proto_decode_queue_list_resp(body, len, &ql);
        break;
    }
    case PROTO_OP_STATUS: {
        struct proto_status st;
        rv = proto_decode_status_resp(body, len, &st);
        break;
    }
    case PROTO_OP_STATS: {
        struct proto_stats st;
        rv = proto_decode_stats_resp(body, len, &st);
        break;
    }
    default:
        rv = proto_decode_empty_resp(body, len);
        break;
    }
    if (rv == 0 && !r->is_async) {
        rv = copy_body(r, body, len);
    }
    if (rv != 0) {
        tern_errmsg_printf(r->errmsg, "bad response from %s",
                           c->servers[i]->addr);
    }
    req_complete(c, r, rv);
}

static int is_retryable(int status)
{
    switch (status) {
    case TERN_ENOLEADER:
    case TERN_ESHUTDOWN:
    case TERN_EBUSY:
    case TERN_ENOCONN:
    case TERN_ELEADERSHIPLOST:
        return 1;
    default:
        return 0;
    }
}

static void on_error(struct tern_client *c,
                     struct tern__req *r,
                     int i,
                     int status,
                     const struct proto_error *e,
                     int64_t now)
{
    struct tern__server *s = c->servers[i];
    int retried = r->attempts > 0;
    int fixed = r->target >= 0 ||
                (!r->leader_only && c->opts.read_from != TERN_READ_LEADER);
    tern_errmsg_printf(r->errmsg, "%s: %.*s", s->addr, (int)e->message_len,
                       e->message != NULL ? e->message : "");
    if (e->message_len == 0) {
        tern_errmsg_printf(r->errmsg, "%s: %s", s->addr, tern_strerror(status));
    }
    r->attempts++;
    if (status == TERN_ENOTLEADER && !fixed) {
        int to = -1;
        if (e->leader_address_len > 0) {
            to =
                find_or_add_server(c, e->leader_address, e->leader_address_len);
        }
        if (to < 0 || to == i) {
            to = next_server(c, i);
        }
        leader_moved(c, i, to);
        req_retry(c, r, now, r->attempts <= 2 ? 0 : backoff_ms(c, r->attempts));
        return;
    }
    if (is_retryable(status)) {
        if (!fixed && (status == TERN_ENOLEADER || status == TERN_ESHUTDOWN ||
                       status == TERN_ENOCONN)) {
            if (r->leader_only || c->opts.read_from == TERN_READ_LEADER) {
                leader_moved(c, i, next_server(c, i));
            } else if (c->read_cur == i) {
                c->read_cur = next_server(c, i);
            }
        }
        req_retry(c, r, now, backoff_ms(c, r->attempts));
        return;
    }
    if (status == TERN_ESEQUENCE && r->pq != NULL) {
        struct tern__req *oldest = pq_oldest(c, r->pq);
        if (oldest != r) {
            /* An earlier batch has not reached this server yet (it was
             * re-queued or is behind us): resend in order. */
            req_detach(c, r);
            req_detach(c, oldest);
            pq_rewind(c, r->pq, oldest->seq, now);
            return;
        }
        if (++r->seq_errors <= TERN__MAX_SEQUENCE_RETRIES) {
            pq_renumber(c, r->pq);
            return;
        }
    }
    if (retried &&
        ((r->op == PROTO_OP_QUEUE_CREATE && status == TERN_EQUEUEEXISTS) ||
         (r->op == PROTO_OP_QUEUE_DELETE && status == TERN_ENOQUEUE))) {
        /* Our own earlier attempt did it. */
        status = 0;
    }
    req_complete(c, r, status);
}

/* Handle one verified frame from server i. Non-zero: the connection must
 * be dropped (protocol error). */
static int dispatch(struct tern_client *c,
                    int i,
                    const struct proto_header *h,
                    const uint8_t *body,
                    int64_t now)
{
    struct tern__server *s = c->servers[i];
    struct proto_error e;
    struct tern__req *r;
    uint8_t op = (uint8_t)(h->op & ~PROTO_OP_RESPONSE);

    if (op == PROTO_OP_ERROR) {
        /* The server could not parse something we sent. */
        int status = h->status != 0 ? h->status : TERN_EMALFORMED;
        if (proto_decode_error(body, h->body_len, status, &e) == 0) {
            tern_errmsg_printf(s->errmsg, "%s: %.*s", s->addr,
                               (int)e.message_len,
                               e.message != NULL ? e.message : "");
        }
        return status;
    }
    if ((h->op & PROTO_OP_RESPONSE) == 0) {
        tern_errmsg_printf(s->errmsg, "%s: unexpected request frame", s->addr);
        return TERN_EMALFORMED;
    }
    for (r = c->head; r != NULL; r = r->next) {
        if (r->state == TERN__REQ_SENT && r->srv == i &&
            r->id == h->request_id) {
            break;
        }
    }
    if (r == NULL) {
        return 0; /* answer to an abandoned attempt */
    }
    if (r->op != op) {
        tern_errmsg_printf(s->errmsg, "%s: response op %u for request op %u",
                           s->addr, op, r->op);
        return TERN_EMALFORMED;
    }
    if (h->status == 0) {
        on_success(c, r, i, body, h->body_len);
        return 0;
    }
    if (proto_decode_error(body, h->body_len, h->status, &e) != 0) {
        tern_errmsg_printf(s->errmsg, "%s: malformed error frame", s->addr);
        return TERN_EMALFORMED;
    }
    on_error(c, r, i, h->status, &e, now);
    return 0;
}

static int parse_frames(struct tern_client *c, int i, int64_t now)
{
    struct tern__server *s = c->servers[i];
    size_t off = 0;
    int rv = 0;
    while (s->in_len - off >= PROTO_HEADER_SIZE) {
        struct proto_header h;
        const uint8_t *hdr = s->in + off;
        rv = proto_header_decode(hdr, c->opts.max_frame, &h);
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "%s: bad frame header: %s", s->addr,
                               tern_strerror(rv));
            return rv;
        }
        if (s->in_len - off - PROTO_HEADER_SIZE < h.body_len) {
            break;
        }
        rv = proto_frame_verify(hdr, hdr + PROTO_HEADER_SIZE, h.body_len);
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "%s: frame checksum mismatch",
                               s->addr);
            return rv;
        }
        rv = dispatch(c, i, &h, hdr + PROTO_HEADER_SIZE, now);
        if (rv != 0) {
            return rv;
        }
        off += PROTO_HEADER_SIZE + (size_t)h.body_len;
    }
    if (off > 0) {
        memmove(s->in, s->in + off, s->in_len - off);
        s->in_len -= off;
    }
    return 0;
}

/* ---- The engine step ---- */

static void flush_all(struct tern_client *c, int64_t now)
{
    for (int i = 0; i < c->n_servers; i++) {
        struct tern__server *s = c->servers[i];
        if (s->state == TERN__CONN_READY && s->out.len > s->out_off) {
            int rv = tern__server_flush(s);
            if (rv != 0) {
                server_fail(c, i, rv, now);
            }
        }
    }
}

/* Run one round of I/O, waiting at most until `until` (monotonic ms).
 * Returns the number of async callbacks fired or a negative code. */
static int step(struct tern_client *c, int64_t until)
{
    int64_t now = tern__now_ms();
    int64_t wake = until;
    int n = c->n_servers;
    int any_queued = 0;
    int rv;

    expire(c, now);
    pump(c, now);
    flush_all(c, now);

    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        wake = TERN_MIN(wake, r->deadline);
        if (r->state == TERN__REQ_QUEUED) {
            any_queued = 1;
            if (r->not_before > now) {
                wake = TERN_MIN(wake, r->not_before);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        struct tern__server *s = c->servers[i];
        struct pollfd *p = &c->pfds[i];
        p->fd = s->fd;
        p->events = 0;
        p->revents = 0;
        if (s->state == TERN__CONN_CONNECTING) {
            p->events = POLLOUT;
            wake = TERN_MIN(wake, s->connect_deadline);
        } else if (s->state == TERN__CONN_READY) {
            p->events = POLLIN;
            if (s->out.len > s->out_off) {
                p->events |= POLLOUT;
            }
        } else if (any_queued && s->retry_after > now) {
            wake = TERN_MIN(wake, s->retry_after);
        }
    }
    if (c->done_head != NULL) {
        wake = now; /* completions to fire: do not block */
    }
    {
        int64_t t = wake - now;
        int timeout = t <= 0 ? 0 : (t > 60000 ? 60000 : (int)t);
        rv = poll(c->pfds, (nfds_t)n, timeout);
        if (rv < 0 && errno != EINTR) {
            rv = -errno;
            tern_errmsg_printf(c->errmsg, "poll: %s", tern_strerror(rv));
            return rv;
        }
    }
    now = tern__now_ms();
    for (int i = 0; i < n; i++) {
        struct tern__server *s = c->servers[i];
        short re = c->pfds[i].revents;
        if (s->fd < 0 || c->pfds[i].fd != s->fd) {
            continue;
        }
        if (s->state == TERN__CONN_CONNECTING) {
            if (re != 0) {
                rv = tern__server_finish_connect(s);
                if (rv != 0) {
                    server_fail(c, i, rv, now);
                    continue;
                }
            } else if (now >= s->connect_deadline) {
                tern_errmsg_printf(s->errmsg, "connect %s: timed out", s->addr);
                server_fail(c, i, -ETIMEDOUT, now);
                continue;
            } else {
                continue;
            }
        }
        if ((re & POLLOUT) != 0 || s->out.len > s->out_off) {
            rv = tern__server_flush(s);
            if (rv != 0) {
                server_fail(c, i, rv, now);
                continue;
            }
        }
        if ((re & (POLLIN | POLLHUP | POLLERR)) != 0) {
            rv = tern__server_read(s);
            if (rv == 0) {
                rv = parse_frames(c, i, now);
            }
            if (rv != 0) {
                server_fail(c, i, rv, now);
                continue;
            }
        }
    }
    return fire_completions(c);
}

/* ---- Client lifetime ---- */

int tern_client_new(const char *servers,
                    const struct tern_client_options *opts,
                    struct tern_client **out)
{
    struct tern_client *c;
    const char *p;
    int rv = 0;
    *out = NULL;
    if (servers == NULL) {
        return TERN_EINVAL;
    }
    c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        return -ENOMEM;
    }
    tern_client_options_init(&c->opts);
    if (opts != NULL) {
        if (opts->connect_timeout_ms > 0) {
            c->opts.connect_timeout_ms = opts->connect_timeout_ms;
        }
        if (opts->request_timeout_ms > 0) {
            c->opts.request_timeout_ms = opts->request_timeout_ms;
        }
        if (opts->retry_backoff_ms > 0) {
            c->opts.retry_backoff_ms = opts->retry_backoff_ms;
        }
        if (opts->max_in_flight > 0) {
            c->opts.max_in_flight = opts->max_in_flight;
        }
        if (opts->read_from >= TERN_READ_LEADER &&
            opts->read_from <= TERN_READ_FIRST) {
            c->opts.read_from = opts->read_from;
        }
        if (opts->max_frame > 0) {
            c->opts.max_frame = opts->max_frame;
        }
    }
    c->producer_id = random_id();
    p = servers;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *a = p;
        size_t alen = len;
        while (alen > 0 && (*a == ' ' || *a == '\t')) {
            a++;
            alen--;
        }
        while (alen > 0 && (a[alen - 1] == ' ' || a[alen - 1] == '\t')) {
            alen--;
        }
        if (alen > 0) {
            struct tern__server probe;
            rv = tern__server_init(&probe, a, alen);
            if (rv != 0) {
                goto err;
            }
            tern__server_free(&probe);
            if (find_or_add_server(c, a, alen) < 0) {
                rv = -ENOMEM;
                goto err;
            }
        }
        p += len;
        if (*p == ',') {
            p++;
        }
    }
    if (c->n_servers == 0) {
        rv = TERN_EINVAL;
        goto err;
    }
    *out = c;
    return 0;

err:
    tern_client_free(c);
    return rv;
}

void tern_client_free(struct tern_client *c)
{
    if (c == NULL) {
        return;
    }
    /* Cancel what is pending; sync requests cannot be pending here. */
    c->closing = 1;
    while (c->head != NULL) {
        req_complete(c, c->head, TERN_ECANCELED);
    }
    (void)fire_completions(c);
    for (int i = 0; i < c->n_servers; i++) {
        tern__server_free(c->servers[i]);
        tern_free(c->servers[i]);
    }
    while (c->pqs != NULL) {
        struct tern__pq *pq = c->pqs;
        c->pqs = pq->next;
        tern_free(pq->queue);
        tern_free(pq);
    }
    tern_free(c->servers);
    tern_free(c->pfds);
    tern_free(c);
}

const char *tern_client_errmsg(const struct tern_client *c)
{
    return c != NULL ? c->errmsg : "";
}

uint64_t tern_client_producer_id(const struct tern_client *c)
{
    return c->producer_id;
}

const char *tern_client_leader(const struct tern_client *c)
{
    if (!c->leader_confirmed) {
        return NULL;
    }
    return c->servers[c->leader]->addr;
}

size_t tern_client_pending(const struct tern_client *c)
{
    return c->async_pending;
}

/* ---- Synchronous requests ---- */

static struct tern__req *req_new(struct tern_client *c,
                                 uint8_t op,
                                 uint32_t extra_ms)
{
    struct tern__req *r = tern_calloc(1, sizeof *r);
    if (r == NULL) {
        return NULL;
    }
    r->op = op;
    r->leader_only = leader_only_op(op);
    r->target = -1;
    r->srv = -1;
    tern_wbuf_init(&r->frame);
    r->deadline = tern__now_ms() + c->opts.request_timeout_ms + extra_ms;
    return r;
}

static int check_call(struct tern_client *c)
{
    if (c->in_callback) {
        tern_errmsg_printf(c->errmsg,
                           "synchronous call from a completion callback");
        return TERN_EINVAL;
    }
    c->errmsg[0] = '\0';
    return 0;
}

/* Run r (already encoded) to completion. r stays owned by the caller. */
static int run_sync(struct tern_client *c, struct tern__req *r)
{
    list_append(c, r);
    while (r->state != TERN__REQ_DONE) {
        int rv = step(c, r->deadline);
        if (rv < 0 && r->state != TERN__REQ_DONE) {
            req_complete(c, r, rv);
            tern_errmsg_printf(r->errmsg, "%s", c->errmsg);
        }
    }
    if (r->status != 0) {
        tern_errmsg_printf(c->errmsg, "%s", r->errmsg);
    }
    return r->status;
}

static int encode_fail(struct tern_client *c,
                       struct tern__req *r,
                       int rv,
                       const char *what)
{
    if (rv == TERN_EBADNAME) {
        tern_errmsg_printf(c->errmsg,
                           "%s: a name is 1..%d bytes of "
                           "[A-Za-z0-9._-]",
                           what, PROTO_MAX_NAME);
    } else {
        tern_errmsg_printf(c->errmsg, "%s: %s", what, tern_strerror(rv));
    }
    req_free(r);
    return rv;
}

/* READ_LEADER with no confirmed leader: ask the leader guess for its
 * status and follow its leader hint, a bounded number of times. Failure
 * is not an error: the read then goes to the current guess. */
static void discover_leader(struct tern_client *c)
{
    /* All attempts together take at most one request timeout. */
    int64_t end = tern__now_ms() + c->opts.request_timeout_ms;
    for (int attempt = 0; attempt < 2 * c->n_servers + 1 &&
                          !c->leader_confirmed && tern__now_ms() < end;
         attempt++) {
        struct tern__req *r = req_new(c, PROTO_OP_STATUS, 0);
        struct proto_status st;
        int at = c->leader;
        if (r == NULL) {
            return;
        }
        r->target = at;
        r->deadline =
            TERN_MIN(end, tern__now_ms() + c->opts.connect_timeout_ms +
                              (int64_t)c->opts.retry_backoff_ms * 4);
        if (proto_encode_simple(&r->frame, PROTO_OP_STATUS, 0) != 0 ||
            run_sync(c, r) != 0 ||
            proto_decode_status_resp(r->body, r->body_len, &st) != 0) {
            req_free(r);
            c->leader = next_server(c, at);
            continue;
        }
        if (st.leader_id != 0 && st.leader_id == st.node_id) {
            c->leader = at;
            c->leader_confirmed = 1;
        } else if (st.leader_address_len > 0) {
            int to =
                find_or_add_server(c, st.leader_address, st.leader_address_len);
            c->leader = to >= 0 && to != at ? to : next_server(c, at);
        } else {
            c->leader = next_server(c, at);
        }
        req_free(r);
    }
    c->errmsg[0] = '\0';
}

static void maybe_discover(struct tern_client *c)
{
    if (c->opts.read_from == TERN_READ_LEADER && !c->leader_confirmed) {
        discover_leader(c);
    }
}

/* Start a synchronous call of op: refuse it from a completion callback,
 * follow the leader first when discover is set (reads), then allocate the
 * request (deadline: request timeout + extra_ms). On success *out is
 * caller-owned: encode into its frame, then run_sync and req_free it, or
 * hand it to encode_fail. On failure *out is NULL. */
static int sync_req_new(struct tern_client *c,
                        uint8_t op,
                        uint32_t extra_ms,
                        int discover,
                        struct tern__req **out)
{
    int rv = check_call(c);
    *out = NULL;
    if (rv != 0) {
        return rv;
    }
    if (discover) {
        maybe_discover(c);
    }
    *out = req_new(c, op, extra_ms);
    return *out != NULL ? 0 : -ENOMEM;
}

static int queue_op(struct tern_client *c, uint8_t op, const char *queue)
{
    struct tern__req *r;
    int rv = sync_req_new(c, op, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_queue_op(&r->frame, op, 0, queue);
    if (rv != 0) {
        return encode_fail(c, r, rv, queue != NULL ? queue : "(null)");
    }
    rv = run_sync(c, r);
    req_free(r);
    return rv;
}

int tern_queue_create(struct tern_client *c, const char *queue)
{
    return queue_op(c, PROTO_OP_QUEUE_CREATE, queue);
}

int tern_queue_delete(struct tern_client *c, const char *queue)
{
    return queue_op(c, PROTO_OP_QUEUE_DELETE, queue);
}

int tern_queue_list(struct tern_client *c, struct tern_queue_list **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = sync_req_new(c, PROTO_OP_QUEUE_LIST, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_simple(&r->frame, PROTO_OP_QUEUE_LIST, 0);
    if (rv != 0) {
        return encode_fail(c, r, rv, "queue list");
    }
    rv = run_sync(c, r);
    if (rv == 0) {
        *out = tern__queue_list_new(r->body, r->body_len);
        if (*out == NULL) {
            rv = -ENOMEM;
        }
    }
    req_free(r);
    return rv;
}

/* Checksum of a batch's messages (lengths and bytes), to tell a resend of
 * the same batch from another one. */
static uint32_t batch_checksum(const struct tern_msg *msgs, size_t n)
{
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    for (size_t k = 0; k < n; k++) {
        uint8_t len[8];
        tern_put_u64(len, (uint64_t)msgs[k].len);
        tern_checksum32_update(&st, len, sizeof len);
        if (msgs[k].len > 0) {
            tern_checksum32_update(&st, msgs[k].data, msgs[k].len);
        }
    }
    return tern_checksum32_end(&st);
}

/* Check a produce call's arguments and find (or make) the queue's producer
 * state. */
static int produce_check(struct tern_client *c,
                         const char *queue,
                         const struct tern_msg *msgs,
                         size_t n,
                         struct tern__pq **pq)
{
    if (queue == NULL || !tern_name_valid(queue, strlen(queue))) {
        tern_errmsg_printf(c->errmsg, "queue name \"%s\"",
                           queue != NULL ? queue : "(null)");
        return TERN_EBADNAME;
    }
    if (n == 0 || msgs == NULL || n > UINT32_MAX) {
        tern_errmsg_printf(c->errmsg, "produce needs 1..2^32-1 messages");
        return TERN_EINVAL;
    }
    for (size_t k = 0; k < n; k++) {
        if (msgs[k].len > c->opts.max_frame ||
            (msgs[k].len > 0 && msgs[k].data == NULL)) {
            tern_errmsg_printf(
                c->errmsg, "message %zu: %s", k,
                msgs[k].data == NULL ? "NULL data" : "too large");
            return msgs[k].data == NULL ? TERN_EINVAL : TERN_ETOOBIG;
        }
    }
    *pq = pq_get(c, queue);
    return *pq != NULL ? 0 : -ENOMEM;
}

/* proto_msg_at_fn over a struct tern_msg array (lengths checked against
 * max_frame, a uint32_t, by produce_check). */
static void tern_msg_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    const struct tern_msg *t = (const struct tern_msg *)msgs + i;
    m->data = t->data;
    m->len = (uint32_t)t->len;
}

/* Build a PRODUCE request carrying (pid, seq): copies msgs into the
 * frame. */
static int produce_build(struct tern_client *c,
                         const char *queue,
                         const struct tern_msg *msgs,
                         size_t n,
                         uint64_t pid,
                         uint64_t seq,
                         struct tern__req **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    r = req_new(c, PROTO_OP_PRODUCE, 0);
    if (r == NULL) {
        return -ENOMEM;
    }
    rv = proto_encode_produce_at(&r->frame, 0, queue, pid, seq, tern_msg_at,
                                 msgs, (uint32_t)n);
    if (rv == 0 && r->frame.len - PROTO_HEADER_SIZE > c->opts.max_frame) {
        rv = TERN_ETOOBIG;
    }
    if (rv != 0) {
        tern_errmsg_printf(c->errmsg, "produce to %s: %s", queue,
                           tern_strerror(rv));
        req_free(r);
        return rv;
    }
    r->pid = pid;
    r->seq = seq;
    r->n_msgs = n;
    r->msg_sum = batch_checksum(msgs, n);
    *out = r;
    return 0;
}

/* Build a PRODUCE request that takes the next sequence number of the
 * queue. */
static int produce_new(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       struct tern__req **out)
{
    struct tern__pq *pq;
    int rv = produce_check(c, queue, msgs, n, &pq);
    *out = NULL;
    if (rv != 0) {
        return rv;
    }
    rv = produce_build(c, queue, msgs, n, pq->producer_id, pq->next_seq, out);
    if (rv != 0) {
        return rv;
    }
    (*out)->pq = pq;
    pq->next_seq++;
    return 0;
}

static void produce_base_out(const struct tern__req *r, uint64_t *base_offset)
{
    if (base_offset != NULL) {
        *base_offset = r->produce.duplicate && r->produce.count == 0
                           ? UINT64_MAX
                           : r->produce.base_offset;
    }
}

int tern_produce(struct tern_client *c,
                 const char *queue,
                 const struct tern_msg *msgs,
                 size_t n,
                 uint64_t *base_offset)
{
    struct tern__req *r;
    int rv = check_call(c);
    if (rv != 0) {
        return rv;
    }
    rv = produce_new(c, queue, msgs, n, &r);
    if (rv != 0) {
        return rv;
    }
    rv = run_sync(c, r);
    if (rv == 0) {
        produce_base_out(r, base_offset);
    }
    req_free(r);
    return rv;
}

int tern_produce_resend(struct tern_client *c,
                        const char *queue,
                        const struct tern_msg *msgs,
                        size_t n,
                        uint64_t *base_offset)
{
    struct tern__req *r;
    struct tern__pq *pq;
    int rv = check_call(c);
    if (rv != 0) {
        return rv;
    }
    rv = produce_check(c, queue, msgs, n, &pq);
    if (rv != 0) {
        return rv;
    }
    if (!pq->unknown_valid) {
        tern_errmsg_printf(c->errmsg,
                           "resend to %s: no batch with an unknown outcome",
                           queue);
        return TERN_EINVAL;
    }
    if (pq->unknown_n != n || pq->unknown_sum != batch_checksum(msgs, n)) {
        tern_errmsg_printf(c->errmsg,
                           "resend to %s: not the batch that timed out "
                           "(%zu messages, checksum %08x)",
                           queue, pq->unknown_n, pq->unknown_sum);
        return TERN_EINVAL;
    }
    rv = produce_build(c, queue, msgs, n, pq->unknown_pid, pq->unknown_seq,
                       &r);
    if (rv != 0) {
        return rv;
    }
    r->resend_of = pq;
    rv = run_sync(c, r);
    if (rv == 0) {
        produce_base_out(r, base_offset);
    }
    req_free(r);
    return rv;
}

int tern_produce_async(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       tern_produce_cb cb,
                       void *arg)
{
    struct tern__req *r;
    int rv;
    if (cb == NULL) {
        tern_errmsg_printf(c->errmsg, "produce_async needs a callback");
        return TERN_EINVAL;
    }
    if (c->closing) {
        tern_errmsg_printf(c->errmsg, "the client is being freed");
        return TERN_ESHUTDOWN;
    }
    rv = produce_new(c, queue, msgs, n, &r);
    if (rv != 0) {
        return rv;
    }
    r->is_async = 1;
    r->deadline = INT64_MAX; /* set at admission to the window */
    r->cb = cb;
    r->arg = arg;
    list_append(c, r);
    c->async_pending++;
    return 0;
}

int tern_client_poll(struct tern_client *c, int timeout_ms)
{
    int64_t until;
    int fired = 0;
    if (c->in_callback) {
        tern_errmsg_printf(c->errmsg, "tern_client_poll from a callback");
        return TERN_EINVAL;
    }
    if (timeout_ms < 0) {
        /* Until one completion, or nothing pending. */
        while (fired == 0 && c->async_pending > 0) {
            int rv = step(c, tern__now_ms() + 60000);
            if (rv < 0) {
                return rv;
            }
            fired += rv;
        }
        return fired;
    }
    until = tern__now_ms() + timeout_ms;
    do {
        int rv = step(c, until);
        if (rv < 0) {
            return rv;
        }
        fired += rv;
    } while (fired == 0 && c->async_pending > 0 && tern__now_ms() < until);
    return fired;
}

/* Finish a fetch-like call: r (from sync_req_new, consumed here) was
 * encoded with result enc (what names the call in errmsg); on success *out
 * is a new caller-owned result. */
static int fetch_finish(struct tern_client *c,
                        struct tern__req *r,
                        int enc,
                        const char *what,
                        struct tern_fetch_result **out)
{
    int rv;
    if (enc != 0) {
        return encode_fail(c, r, enc, what);
    }
    rv = run_sync(c, r);
    if (rv == 0) {
        *out = tern__fetch_result_new(r->body, r->body_len);
        if (*out == NULL) {
            rv = -ENOMEM;
        }
    }
    req_free(r);
    return rv;
}

int tern_fetch(struct tern_client *c,
               const char *queue,
               uint64_t offset,
               uint32_t max_msgs,
               uint32_t max_bytes,
               uint32_t wait_ms,
               struct tern_fetch_result **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = sync_req_new(c, PROTO_OP_FETCH, wait_ms, 1, &r);
    if (rv != 0) {
        return rv;
    }
    /* A READ_LEADER fetch asks the server to answer only as a writable
     * leader, so a deposed leader redirects it (ENOTLEADER, followed in
     * on_error) instead of serving its own, possibly older, queue end; its
     * answer then confirms the leader like a write's (on_success). */
    r->leader_only = c->opts.read_from == TERN_READ_LEADER;
    rv = proto_encode_fetch(
        &r->frame, 0, queue, offset, max_msgs,
        max_bytes != 0 ? max_bytes : TERN__FETCH_MAX_BYTES_DEFAULT, wait_ms,
        r->leader_only ? PROTO_FETCH_LEADER : 0);
    return fetch_finish(c, r, rv, queue != NULL ? queue : "(null)", out);
}

int tern_group_fetch(struct tern_client *c,
                     const char *queue,
                     const char *group,
                     uint32_t max_msgs,
                     uint32_t max_bytes,
                     uint32_t wait_ms,
                     struct tern_fetch_result **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = sync_req_new(c, PROTO_OP_GROUP_FETCH, wait_ms, 1, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_group_fetch(
        &r->frame, 0, queue, group, max_msgs,
        max_bytes != 0 ? max_bytes : TERN__FETCH_MAX_BYTES_DEFAULT, wait_ms);
    return fetch_finish(c, r, rv, "group fetch", out);
}

int tern_group_commit(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      uint64_t next_offset)
{
    struct tern__req *r;
    int rv = sync_req_new(c, PROTO_OP_GROUP_COMMIT, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_group_commit(&r->frame, 0, queue, group, next_offset);
    if (rv != 0) {
        return encode_fail(c, r, rv, "group commit");
    }
    rv = run_sync(c, r);
    req_free(r);
    return rv;
}

int tern_cluster_status(struct tern_client *c,
                        const char *address,
                        struct tern_status **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = sync_req_new(c, PROTO_OP_STATUS, 0, address == NULL, &r);
    if (rv != 0) {
        return rv;
    }
    if (address != NULL) {
        r->target = find_or_add_server(c, address, strlen(address));
        if (r->target < 0) {
            tern_errmsg_printf(c->errmsg, "bad server address \"%s\"", address);
            req_free(r);
            return TERN_EINVAL;
        }
    }
    rv = proto_encode_simple(&r->frame, PROTO_OP_STATUS, 0);
    if (rv != 0) {
        return encode_fail(c, r, rv, "status");
    }
    rv = run_sync(c, r);
    if (rv == 0) {
        *out = tern__status_new(c->servers[r->answered_by]->addr, r->body,
                                r->body_len);
        if (*out == NULL) {
            rv = -ENOMEM;
        }
    }
    req_free(r);
    return rv;
}

/* Copy len bytes of s into dst[size] as a NUL-terminated string. */
static void copy_str(char *dst, size_t size, const char *s, size_t len)
{
    len = TERN_MIN(len, size - 1);
    if (len > 0) {
        memcpy(dst, s, len);
    }
    dst[len] = '\0';
}

int tern_replication_stats(struct tern_client *c,
                           const char *address,
                           int reset,
                           struct tern_repl_stats *out)
{
    struct tern__req *r;
    struct proto_stats st;
    const char *server;
    int rv;
    memset(out, 0, sizeof *out);
    rv = sync_req_new(c, PROTO_OP_STATS, 0, address == NULL, &r);
    if (rv != 0) {
        return rv;
    }
    if (address != NULL) {
        r->target = find_or_add_server(c, address, strlen(address));
        if (r->target < 0) {
            tern_errmsg_printf(c->errmsg, "bad server address \"%s\"", address);
            req_free(r);
            return TERN_EINVAL;
        }
    }
    rv = proto_encode_stats_req(&r->frame, 0,
                                reset != 0 ? PROTO_STATS_RESET : 0);
    if (rv != 0) {
        return encode_fail(c, r, rv, "replication stats");
    }
    rv = run_sync(c, r);
    if (rv == 0) {
        /* on_success validated the body. */
        rv = proto_decode_stats_resp(r->body, r->body_len, &st);
    }
    if (rv == 0) {
        server = c->servers[r->answered_by]->addr;
        copy_str(out->server, sizeof out->server, server, strlen(server));
        out->node_id = st.node_id;
        out->role = st.role;
        copy_str(out->transport, sizeof out->transport, st.transport,
                 st.transport_len);
        copy_str(out->durability, sizeof out->durability, st.durability,
                 st.durability_len);
        out->count = st.count;
        out->dropped = st.dropped;
        out->mean_ns = st.count > 0 ? st.sum_ns / st.count : 0;
        out->min_ns = st.min_ns;
        out->p50_ns = st.p50_ns;
        out->p90_ns = st.p90_ns;
        out->p99_ns = st.p99_ns;
        out->p999_ns = st.p999_ns;
        out->max_ns = st.max_ns;
    }
    req_free(r);
    return rv;
}
