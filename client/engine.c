/*
 * libtern's request engine: whatever drives a request to an answer.
 *
 * Every call, sync or async, becomes a request (struct tern__req) on the
 * client's list, kept in creation order. One engine step (tern__step)
 * expires requests past their deadline, sends queued requests to their
 * target server, polls the sockets, and dispatches responses by request
 * id. Synchronous calls run steps until their own request is done
 * (tern__run_sync); async produce batches complete inside
 * tern_client_poll. No threads.
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
 *     a server that hints itself (a leader not ready for writes yet) is
 *     asked again after the back-off;
 *   - TERN_ENOLEADER, ESHUTDOWN, EBUSY, ENOCONN, ELEADERSHIPLOST: re-queued
 *     with back-off (produce is idempotent, so an ambiguous outcome is safe
 *     to retry), to the next server that has not gone silent;
 *   - TERN_ESEQUENCE on a produce: the queue's batches are rewound or
 *     renumbered (producer.c) and resent in sequence order;
 *   - TERN_ELEADERSHIPLOST from a leader-following request (the leader
 *     stepped down with the write in flight): handled like
 *     TERN_ENOTLEADER, the hint (the new leader, when the deposed one
 *     knows it) or the next server;
 *   - the server of an attempt is silent (attempt deadlines, below): the
 *     attempt is abandoned and the request goes to another server;
 *   - the deadline passes: TERN_ETIMEDOUT (outcome unknown);
 *   - no connection ever came up and every server refused it or did not
 *     resolve (connect_hard_fail): every request fails at once with that
 *     -errno, as none was ever sent.
 *
 * Login (tern_client_set_auth): a connection that comes up (TCP, then
 * TLS) goes to state AUTH and runs login.c's exchange before it is READY;
 * requests wait queued meanwhile. A refused login fails the requests
 * waiting for that server with TERN_EAUTH, like a refused certificate,
 * without trying another server.
 *
 * Attempt deadlines (attempt_timeout_ms, T): a request that follows the
 * leader (leader-only, or a read with read_from LEADER, no fixed target)
 * is abandoned on its server when that server has sent no byte at all
 * for T since the attempt was sent: a paused or cut-off process, whose
 * TCP connection stays up, is then left within about T instead of at the
 * request deadline. After T/2 of silence the engine sends the server a
 * STATUS probe (its answer matches no request and is dropped), so a
 * server that is alive but slow to commit (a large batch, a slow disk)
 * keeps talking and is never abandoned; answers to any other request
 * count too. Leader watch: once the probe has gone unanswered for T/6,
 * the other servers are asked for their status every T/6 (connected first
 * if need be; an answer from a term older than one seen is ignored); one that
 * answers it is a writable leader takes the quiet server's attempts at
 * once, as an abandon would, so a leader cut off by the network costs the
 * client the election, not T. A follower's answer moves nothing (it may
 * still follow the quiet server). Happy path of an abandon: the attempt is
 * detached (a late answer is ignored), later batches of its queue are taken
 * back with it (producer.c keeps sequence order), the server counts as silent
 * for 4T (until it sends a byte, or its connection fails), the leader guess
 * moves to the next server that is neither silent nor failing, and the
 * request is resent at once under the same producer id and sequence, so
 * the cluster appends it once whichever copy lands. Failure modes: a
 * follower that still hints the silent server (it has not noticed yet)
 * is asked again after the base back-off, without growing it, and holds
 * the write itself once it has no leader (server.c); T doubles per
 * abandon of the same request (up to 16x), so a server whose loop is
 * stalled longer than T is given longer each time instead of a resend
 * loop; request_timeout_ms still ends the request with TERN_ETIMEDOUT.
 *
 * Async window: an async batch is admitted to the window (max_in_flight)
 * in list order and stays admitted across retries until it completes; its
 * deadline starts at admission.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client_int.h"

/* How many TERN_ESEQUENCE answers to a queue's oldest batch renumber the
 * queue (tern__pq_renumber) before the batch fails with TERN_ESEQUENCE. */
#define TERN__MAX_SEQUENCE_RETRIES 5

/* ---- Servers ---- */

/* Retry delay after attempts failures: the base back-off, doubled per
 * attempt up to 16x. */
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
    switch (op) {
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_DELETE:
    case PROTO_OP_PRODUCE:
    case PROTO_OP_PRODUCE_DELAYED:
    case PROTO_OP_GROUP_COMMIT:
    case PROTO_OP_GROUP_FETCH:
    case PROTO_OP_USER_SET:
    case PROTO_OP_USER_DELETE:
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
    case PROTO_OP_NAMESPACE_SET:
    case PROTO_OP_NAMESPACE_DELETE:
    case PROTO_OP_PRODUCER_INIT:
    case PROTO_OP_QUEUE_UPDATE:
    case PROTO_OP_SHARED_CONFIG:
    case PROTO_OP_RECEIVE:
    case PROTO_OP_SETTLE:
    case PROTO_OP_CLAIM:
    case PROTO_OP_CLUSTER_TRANSFER:
        return 1;
    default:
        return 0;
    }
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

int tern__find_or_add_server(struct tern_client *c,
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

/* ---- Requests ---- */

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

struct tern__req *tern__req_new(struct tern_client *c,
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

void tern__req_free(struct tern__req *r)
{
    if (r == NULL) {
        return;
    }
    if (r->pq != NULL) {
        tern__pq_release(r->pq);
    }
    if (r->resend_of != NULL) {
        tern__pq_release(r->resend_of);
    }
    tern_wbuf_free(&r->frame);
    tern_free(r->body);
    tern_free(r->parts);
    tern_free(r);
}

/* r is done with status: off the wire, the window and the list; an async
 * r waits on the done list for its callback (fire_completions), a sync r
 * goes back to its caller. */
static void req_complete(struct tern_client *c, struct tern__req *r, int status)
{
    tern__produce_note_outcome(r, status);
    tern__req_detach(r);
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

/* The callbacks of a merged batch, one per call in call order, each
 * with its own messages' offsets (the batch's are consecutive); a
 * duplicate whose offsets are unknown is that for every call, a failure
 * fails every call. Returns how many. */
static int fire_parts(struct tern_client *c, struct tern__req *r)
{
    uint64_t base = r->produce.base_offset;
    /* Offsets only for the batch's own count: a duplicate of a batch the
     * server no longer remembers answers 0, and any other count cannot
     * be split among the calls (each then gets "offsets unknown"). */
    bool known = r->status == 0 && r->produce.count == r->n_msgs;
    for (size_t k = 0; k < r->n_parts; k++) {
        const struct tern__part *p = &r->parts[k];
        c->async_pending--;
        if (r->status != 0) {
            tern_errmsg_printf(c->errmsg,
                               "%s (a batch of %zu merged calls; this "
                               "is call %zu)",
                               r->errmsg, r->n_parts, k + 1);
        }
        c->in_callback++;
        p->cb(p->arg, r->status, known ? base : 0, known ? p->n : 0);
        c->in_callback--;
        base += p->n;
    }
    return (int)r->n_parts;
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
        if (r->n_parts > 0) {
            n += fire_parts(c, r);
            tern__req_free(r);
            continue;
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
        tern__req_free(r);
        n++;
    }
    return n;
}

/* Put r back in the queue to be re-sent not before now + delay. */
static void req_retry(struct tern_client *c,
                      struct tern__req *r,
                      int64_t now,
                      int64_t delay)
{
    tern__req_detach(r);
    r->not_before = now + delay;
    if (r->pq != NULL) {
        tern__pq_rewind(c, r->pq, r->seq, r->not_before);
    }
}

/* ---- Targets, failed connections, deadlines ---- */

/* The leader guess moves from server `from` (or from anywhere when from
 * is -1) to server `to`, unconfirmed. */
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

/* Is server i a poor target right now: silent since an attempt on it was
 * abandoned, or its connection failed and is in back-off? */
static int server_suspect(const struct tern_client *c, int i, int64_t now)
{
    const struct tern__server *s = c->servers[i];
    return now < s->silent_until || (s->state == TERN__CONN_CLOSED &&
                                     s->failures > 0 && now < s->retry_after);
}

/* The server after i that is not suspect, else simply the next one. */
static int next_live_server(const struct tern_client *c, int i, int64_t now)
{
    for (int k = 1; k < c->n_servers; k++) {
        int j = (i + k) % c->n_servers;
        if (!server_suspect(c, j, now)) {
            return j;
        }
    }
    return next_server(c, i);
}

/* The server r goes to: its fixed target, the leader guess for
 * leader-only requests, else the one read_from picks. */
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

/* A connection attempt failed in a way that retrying within the request
 * deadline is not expected to change: refused, no route, no such host. */
static int hard_connect_error(int code)
{
    return code == -ECONNREFUSED || code == -EHOSTUNREACH ||
           code == -ENETUNREACH || code == -EADDRNOTAVAIL;
}

/* Before any connection ever came up: when every server's last attempt
 * failed hard, fail every request now with that code (the last server's)
 * and each server's reason, instead of retrying until the deadline
 * (nothing was sent, so the outcome is known). */
static void connect_hard_fail(struct tern_client *c, int code)
{
    char why[TERN_ERRMSG_SIZE];
    size_t used = 0;
    if (c->ever_connected) {
        return;
    }
    for (int i = 0; i < c->n_servers; i++) {
        if (c->servers[i]->hard_error == 0) {
            return;
        }
    }
    why[0] = '\0';
    for (int i = 0; i < c->n_servers && used + 1 < sizeof why; i++) {
        int n = snprintf(why + used, sizeof why - used, "%s%s",
                         i > 0 ? "; " : "", c->servers[i]->errmsg);
        if (n < 0) {
            break;
        }
        used += (size_t)n;
    }
    for (struct tern__req *r = c->head; r != NULL;) {
        struct tern__req *next = r->next;
        if (r->state == TERN__REQ_QUEUED) {
            tern_errmsg_printf(r->errmsg, "%s", why);
            req_complete(c, r, code);
        }
        r = next;
    }
}

/* The connection to server i failed: close it, re-queue what was on it. */
static void server_fail(struct tern_client *c, int i, int code, int64_t now)
{
    struct tern__server *s = c->servers[i];
    s->hard_error = !c->ever_connected && hard_connect_error(code) ? code : 0;
    tern__server_close(s);
    s->failures++;
    s->retry_after = now + backoff_ms(c, s->failures);
    if (s->errmsg[0] == '\0') {
        tern_errmsg_printf(s->errmsg, "%s: %s", s->addr, tern_strerror(code));
    }
    for (struct tern__req *r = c->head; r != NULL;) {
        struct tern__req *next = r->next;
        if (code == TERN_EAUTH && r->state == TERN__REQ_QUEUED &&
            req_target(c, r) == i) {
            /* TLS refused the server (or it refused us) before anything
             * was sent: retrying will not change the certificates. */
            tern_errmsg_printf(r->errmsg, "%s", s->errmsg);
            req_complete(c, r, TERN_EAUTH);
        } else if (r->state == TERN__REQ_SENT && r->srv == i) {
            tern_errmsg_printf(r->errmsg, "%s", s->errmsg);
            r->attempts++;
            req_retry(c, r, now, backoff_ms(c, r->attempts));
        } else if (r->state == TERN__REQ_QUEUED && req_target(c, r) == i) {
            /* Waiting for this connection: remember why it failed. */
            tern_errmsg_printf(r->errmsg, "%s", s->errmsg);
        }
        r = next;
    }
    if (c->leader == i) {
        leader_moved(c, i, next_server(c, i));
    }
    if (c->read_cur == i) {
        c->read_cur = next_server(c, i);
    }
    if (s->hard_error != 0) {
        connect_hard_fail(c, code);
    }
}

/* Complete every request whose deadline has passed with TERN_ETIMEDOUT. */
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

/* ---- Attempt deadlines (top of the file) ---- */

/* Does r go wherever the leader is (so another server may take it)? */
static int follows_leader(const struct tern_client *c,
                          const struct tern__req *r)
{
    return r->target < 0 &&
           (r->leader_only || c->opts.read_from == TERN_READ_LEADER);
}

/* The attempt timeout of r: T doubled per abandoned attempt, up to 16x. */
static int64_t attempt_timeout(const struct tern_client *c,
                               const struct tern__req *r)
{
    return (int64_t)c->opts.attempt_timeout_ms << TERN_MIN(r->silent_aborts, 4);
}

/* When r's server last showed life for this attempt. */
static int64_t attempt_quiet_since(const struct tern_client *c,
                                   const struct tern__req *r)
{
    return TERN_MAX(r->sent_at, c->servers[r->srv]->last_rx);
}

/* Ask server i for its status: any answer proves it alive. */
static void send_probe(struct tern_client *c, int i)
{
    struct tern__server *s = c->servers[i];
    if (s->state != TERN__CONN_READY) {
        return;
    }
    if (proto_encode_simple(&s->out, PROTO_OP_STATUS, ++c->next_id) != 0 ||
        s->out.err != 0) {
        s->out.err = 0; /* ENOMEM: no probe this time */
        return;
    }
    s->probe_pending = 1;
}

/* Abandon r's attempt on its silent server i and send r elsewhere. */
/* Leave r's attempt on its quiet server (attempt timeout t): the server
 * counts as silent for 4t and r is resent at once, elsewhere. The caller
 * has said why in r->errmsg and moves the leader guess. */
static void leave_attempt(struct tern_client *c,
                          struct tern__req *r,
                          int64_t t,
                          int64_t now)
{
    c->servers[r->srv]->silent_until = now + 4 * t;
    r->attempts++;
    req_retry(c, r, now, 0);
}

static void abandon_attempt(struct tern_client *c,
                            struct tern__req *r,
                            int64_t t,
                            int64_t now)
{
    int i = r->srv;
    tern_errmsg_printf(r->errmsg,
                       "%s: no answer and no sign of life within the "
                       "attempt timeout (%lld ms)",
                       c->servers[i]->addr, (long long)t);
    r->silent_aborts++;
    leave_attempt(c, r, t, now);
    if (c->leader == i) {
        leader_moved(c, i, next_live_server(c, i, now));
    }
}

static int server_ready(struct tern_client *c, int i, int64_t now);

/* Leader watch: server `quiet` has not answered the probe sent after half
 * an attempt timeout t within t/6; every other server is asked for its
 * status (connected first if need be), again every t/6 while that lasts. One
 * that answers that it leads and takes writes gets the quiet server's attempts
 * at once (watch_answer) instead of after the rest of the timeout: a leader cut
 * off by the network is replaced within an election, and this is how the client
 * hears of it. */
static void watch_others(struct tern_client *c,
                         int quiet,
                         int64_t t,
                         int64_t now)
{
    int connecting = 0;
    if (now < c->watch_next) {
        return;
    }
    for (int j = 0; j < c->n_servers; j++) {
        struct tern__server *s = c->servers[j];
        if (j == quiet) {
            continue;
        }
        if (!server_ready(c, j, now)) {
            connecting = 1; /* asked once it is up */
            continue;
        }
        if (s->watch_id != 0 && now - s->watch_at < t) {
            continue; /* still asked */
        }
        if (proto_encode_simple(&s->out, PROTO_OP_STATUS, ++c->next_id) != 0 ||
            s->out.err != 0) {
            s->out.err = 0; /* ENOMEM: not this round */
            continue;
        }
        s->watch_id = c->next_id;
        s->watch_at = now;
    }
    /* A connection just started is asked as soon as it is up. */
    c->watch_next = now + TERN_MAX(connecting ? TERN_MIN(t / 6, 10) : t / 6, 1);
}

/* The answer to watch_others' STATUS from server i: if i leads and takes
 * writes, in a term no older than any answer seen, the quiet server's
 * attempts move to it, it becomes the leader guess, and writes in a
 * back-off go at once. */
static void watch_answer(struct tern_client *c,
                         int i,
                         const struct proto_header *h,
                         const uint8_t *body,
                         int64_t now)
{
    struct proto_status st;
    int moved = -1;
    if (h->status != 0 ||
        proto_decode_status_resp(body, h->body_len, &st) != 0) {
        return;
    }
    if (!st.writable || st.leader_id != st.node_id || st.node_id == 0) {
        return; /* not a writable leader (its term says nothing: a cut-off
                   candidate raises its own) */
    }
    if (st.term < c->watch_term) {
        return; /* older than a leader seen already (a deposed one) */
    }
    c->watch_term = st.term;
    for (struct tern__req *r = c->head; r != NULL;) {
        struct tern__req *next = r->next;
        if (r->state == TERN__REQ_SENT && !r->unasked && r->srv != i &&
            follows_leader(c, r)) {
            int64_t t = attempt_timeout(c, r);
            if (now - attempt_quiet_since(c, r) >= t / 2) {
                tern_errmsg_printf(r->errmsg,
                                   "%s: quiet for %lld ms while %s leads",
                                   c->servers[r->srv]->addr,
                                   (long long)(now - attempt_quiet_since(c, r)),
                                   c->servers[i]->addr);
                moved = r->srv;
                leave_attempt(c, r, t, now);
            }
        }
        r = next;
    }
    if (moved < 0) {
        return;
    }
    leader_moved(c, -1, i);
    /* Writes waiting out a back-off after "not the leader" answers from
     * the others: the leader is known now. */
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->state == TERN__REQ_QUEUED && r->not_before > now &&
            follows_leader(c, r)) {
            r->not_before = now;
        }
    }
}

/* Abandon the attempts whose server has been silent for their attempt
 * timeout; probe the servers silent for half of it, and watch the others
 * (watch_others). */
static void check_attempts(struct tern_client *c, int64_t now)
{
    if (c->opts.attempt_timeout_ms <= 0 || c->n_servers < 2) {
        return;
    }
    for (struct tern__req *r = c->head; r != NULL;) {
        struct tern__req *next = r->next;
        if (r->state == TERN__REQ_SENT && !r->unasked && follows_leader(c, r)) {
            int64_t t = attempt_timeout(c, r);
            int64_t quiet = now - attempt_quiet_since(c, r);
            if (quiet >= t) {
                abandon_attempt(c, r, t, now);
                /* Later batches of its queue may have been taken back
                 * (next is still on the list, maybe QUEUED now). */
            } else if (quiet >= t / 2) {
                if (!c->servers[r->srv]->probe_pending) {
                    send_probe(c, r->srv);
                } else if (quiet >= t / 2 + t / 6) {
                    watch_others(c, r->srv, t, now);
                }
            }
        }
        r = next;
    }
}

/* The next time check_attempts has something to do for r (SENT). */
static int64_t attempt_wake(const struct tern_client *c,
                            const struct tern__req *r)
{
    int64_t t = attempt_timeout(c, r);
    int64_t q = attempt_quiet_since(c, r);
    /* Once the probe has gone unanswered for t/6, the next watch round
     * too (never earlier: watch_next may be an older round's). */
    int64_t w = TERN_MAX(c->watch_next, q + t / 2 + t / 6);
    return c->servers[r->srv]->probe_pending ? TERN_MIN(q + t, w) : q + t / 2;
}

/* ---- Sending ---- */

/* Server i's connection may just have come up (READY): start the login
 * if the client authenticates. 0, or the connection failed (dropped). */
static int server_up(struct tern_client *c, int i, int64_t now)
{
    struct tern__server *s = c->servers[i];
    if (s->state == TERN__CONN_READY && c->auth != NULL && !s->logged_in) {
        int rv = tern__login_start(c, s, now);
        if (rv != 0) {
            server_fail(c, i, rv, now);
            return rv;
        }
    }
    return 0;
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
        int rv = tern__server_connect(s, now, c->opts.connect_timeout_ms,
                                      c->tls_ctx);
        if (rv != 0) {
            server_fail(c, i, rv, now);
            return 0;
        }
        if (s->state != TERN__CONN_CONNECTING) {
            c->ever_connected = 1;
        }
        if (server_up(c, i, now) != 0) {
            return 0;
        }
        return s->state == TERN__CONN_READY;
    }
    return 0;
}

/* Before the first request on s's connection: HELLO asking for frames
 * of version 2 and FETCH answers in the runs layout (proto.h), not waited
 * for; its answer matches no request (dispatch). ENOMEM: none on this
 * connection, which stays in version 1 and the other layout. */
static void send_hello(struct tern_client *c, struct tern__server *s)
{
    if (s->hello_sent) {
        return;
    }
    s->hello_sent = 1;
    if (proto_encode_hello(&s->out, ++c->next_id,
                           PROTO_FEATURE_XXH3 | PROTO_FEATURE_RUNS) != 0 ||
        s->out.err != 0) {
        s->out.err = 0;
    }
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
                send_hello(c, s);
                r->id = ++c->next_id;
                (void)proto_frame_seal_request(
                    r->frame.base, r->frame.len, r->id,
                    s->xxh3 ? PROTO_VERSION_XXH3 : TERN_PROTO_VERSION);
                tern_wbuf_put(&s->out, r->frame.base, r->frame.len);
                if (s->out.err != 0) {
                    /* ENOMEM: keep the request queued, try again later. */
                    s->out.err = 0;
                    r->id = 0;
                } else {
                    sent = 1;
                    r->state = TERN__REQ_SENT;
                    r->srv = i;
                    r->sent_at = now;
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
    case PROTO_OP_GROUP_FETCH:
    case PROTO_OP_MESSAGE_GET:
    case PROTO_OP_RECEIVE: {
        struct proto_fetch_resp fr;
        struct proto_group_skip skip;
        /* The server answered a FETCH in the layout its connection took
         * with HELLO, which went out before any request on it. */
        r->runs = r->op == PROTO_OP_FETCH && c->servers[i]->runs;
        rv = tern__fetch_decode(
            body, len, r->result_mode | (r->runs ? TERN__RESULT_RUNS : 0), &fr,
            &skip);
        break;
    }
    case PROTO_OP_QUEUE_INFO:
        rv = tern__queue_info_check(body, len);
        break;
    case PROTO_OP_PRODUCE_DELAYED: {
        uint32_t count = 0;
        uint64_t due = 0;
        rv = proto_decode_produce_delayed_resp(body, len, &count, &due);
        if (rv == 0 && count != r->n_msgs) {
            rv = TERN_EMALFORMED;
        }
        break;
    }
    case PROTO_OP_SETTLE: {
        const uint8_t *done;
        uint32_t n = 0;
        rv = proto_decode_settle_resp(body, len, &done, &n);
        if (rv == 0 && n != r->n_msgs) {
            rv = TERN_EMALFORMED;
        }
        break;
    }
    case PROTO_OP_CLAIM: {
        uint8_t granted = 0;
        uint64_t holder = 0, until = 0;
        rv = proto_decode_claim_resp(body, len, &granted, &holder, &until);
        break;
    }
    case PROTO_OP_OFFSET_FOR_TIME: {
        uint64_t off = 0;
        rv = proto_decode_offset_resp(body, len, &off);
        break;
    }
    case PROTO_OP_MESSAGE_TRACE: {
        struct proto_trace tr;
        rv = proto_decode_message_trace_resp(body, len, &tr);
        break;
    }
    case PROTO_OP_GROUP_STATUS: {
        struct proto_group_status_resp gs;
        rv = proto_decode_group_status_resp(body, len, &gs);
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
    case PROTO_OP_MEMBER: {
        uint8_t role = 0;
        rv = proto_decode_member_resp(body, len, &role);
        break;
    }
    case PROTO_OP_BACKUP: {
        struct proto_backup_info b;
        rv = proto_decode_backup_resp(body, len, &b);
        break;
    }
    case PROTO_OP_USER_LIST:
    case PROTO_OP_ACL_LIST:
    case PROTO_OP_NAMESPACE_LIST: {
        struct proto_list_resp lr;
        rv = proto_decode_list_resp(r->op, body, len, &lr);
        break;
    }
    case PROTO_OP_CLUSTER_TRANSFER: {
        uint64_t leader = 0, term = 0;
        rv = proto_decode_cluster_transfer_resp(body, len, &leader, &term);
        if (rv == 0 && c->leader == i) {
            /* The answering server led; now another node does: the next
             * leader-only request learns where from its redirect. */
            c->leader_confirmed = 0;
        }
        break;
    }
    case PROTO_OP_PRODUCER_INIT: {
        uint64_t pid = 0;
        rv = proto_decode_producer_init_resp(body, len, &pid);
        if (rv == 0 && (pid == 0 || (pid & 0xffffffffu) != 0)) {
            rv = TERN_EMALFORMED; /* not a block base n << 32 */
        }
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

/* Did r's server hold it before answering "no leader" (an election under
 * way: server.c hold_write holds a write up to an election timeout and
 * answers TERN_ENOTLEADER without a hint if none was elected)? Such an
 * answer paced the client already: the next server is asked after the
 * base back-off, without growth, so a long election adds no grown
 * back-off after its end. */
static int answer_was_held(const struct tern_client *c,
                           const struct tern__req *r,
                           int64_t now)
{
    return now - r->sent_at >= 2 * backoff_ms(c, 1);
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
    int64_t delay;
    int fixed = r->target >= 0 ||
                (!r->leader_only && c->opts.read_from != TERN_READ_LEADER);
    tern_errmsg_printf(r->errmsg, "%s: %.*s", s->addr, (int)e->message_len,
                       e->message != NULL ? e->message : "");
    if (e->message_len == 0) {
        tern_errmsg_printf(r->errmsg, "%s: %s", s->addr, tern_strerror(status));
    }
    r->attempts++;
    if ((status == TERN_ENOTLEADER || status == TERN_ELEADERSHIPLOST) &&
        !fixed) {
        int to = -1;
        if (e->leader_address_len > 0) {
            to = tern__find_or_add_server(c, e->leader_address,
                                          e->leader_address_len);
        }
        if (status == TERN_ENOTLEADER && to >= 0 && to != i &&
            server_suspect(c, to, now)) {
            /* It still names a leader that went silent or whose
             * connection failed: that leader is probably paused or gone
             * and this server has not noticed yet. Ask it again after the
             * base back-off; once it knows no leader it holds the write
             * until an election ends and hints the winner. The bounce
             * is not counted, so the redirects after it start from the
             * base back-off. */
            r->attempts--;
            leader_moved(c, -1, i);
            req_retry(c, r, now, backoff_ms(c, 1));
            return;
        }
        if (to == i) {
            /* It leads but is not ready for writes yet (its barrier after
             * the election, e.g. just after a leadership transfer): ask it
             * again after the base back-off (growing after 5 attempts)
             * rather than go round the others; at once if it held the
             * write until it was ready (server.c hold_write). */
            req_retry(
                c, r, now,
                answer_was_held(c, r, now)
                    ? 0
                    : backoff_ms(c, r->attempts <= 5 ? 1 : r->attempts - 4));
            return;
        }
        /* Two redirects at once, then the back-off from its base: a
         * redirect without a hint usually means an election (or a
         * leadership transfer) of a few ms is under way. */
        delay = r->attempts <= 2 ? 0 : backoff_ms(c, r->attempts - 2);
        if (to < 0) {
            to = next_live_server(c, i, now);
            if (answer_was_held(c, r, now)) {
                delay = TERN_MIN(delay, backoff_ms(c, 1));
            }
        }
        leader_moved(c, i, to);
        req_retry(c, r, now, delay);
        return;
    }
    if (is_retryable(status)) {
        if (!fixed && (status == TERN_ENOLEADER || status == TERN_ESHUTDOWN ||
                       status == TERN_ENOCONN)) {
            /* Not back to a server that went silent: it would hold the
             * request for a (doubled) attempt timeout. */
            if (r->leader_only || c->opts.read_from == TERN_READ_LEADER) {
                leader_moved(c, i, next_live_server(c, i, now));
            } else if (c->read_cur == i) {
                c->read_cur = next_live_server(c, i, now);
            }
        }
        req_retry(c, r, now, backoff_ms(c, r->attempts));
        return;
    }
    if (status == TERN_ESEQUENCE && r->pq != NULL) {
        struct tern__req *oldest = tern__pq_oldest(c, r->pq);
        if (oldest != r) {
            /* An earlier batch has not reached this server yet (it was
             * re-queued or is behind us): resend in order. */
            tern__req_detach(r);
            tern__req_detach(oldest);
            tern__pq_rewind(c, r->pq, oldest->seq, now);
            return;
        }
        if (++r->seq_errors <= TERN__MAX_SEQUENCE_RETRIES) {
            tern__pq_renumber(c, r->pq);
            return;
        }
    }
    if (retried &&
        ((r->op == PROTO_OP_QUEUE_CREATE && status == TERN_EQUEUEEXISTS) ||
         (r->op == PROTO_OP_QUEUE_DELETE && status == TERN_ENOQUEUE) ||
         ((r->op == PROTO_OP_USER_DELETE || r->op == PROTO_OP_ACL_DELETE ||
           r->op == PROTO_OP_NAMESPACE_DELETE) &&
          status == TERN_ENOTFOUND))) {
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

    if (s->state == TERN__CONN_AUTH) {
        return tern__login_on_frame(c, s, h, body);
    }
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
    if (op == PROTO_OP_STATUS && s->watch_id != 0 &&
        h->request_id == s->watch_id) {
        s->watch_id = 0;
        watch_answer(c, i, h, body, now);
        return 0;
    }
    if (op == PROTO_OP_HELLO) {
        /* send_hello's answer; an older server's TERN_EINVAL keeps the
         * connection in version 1. */
        uint32_t taken = 0;
        if (h->status == 0 &&
            proto_decode_hello_resp(body, h->body_len, &taken) == 0) {
            s->xxh3 = (taken & PROTO_FEATURE_XXH3) != 0;
            s->runs = (taken & PROTO_FEATURE_RUNS) != 0;
        }
        return 0;
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
        if ((s->state == TERN__CONN_READY || s->state == TERN__CONN_AUTH) &&
            tern__server_want_write(s)) {
            int rv = tern__server_flush(s);
            if (rv != 0) {
                server_fail(c, i, rv, now);
            }
        }
    }
}

/* Run one round of I/O, waiting at most until `until` (monotonic ms).
 * Returns the number of async callbacks fired or a negative code. */
int tern__step(struct tern_client *c, int64_t until)
{
    int64_t now = tern__now_ms();
    int64_t wake = until;
    int n = c->n_servers;
    int any_queued = 0;
    int rv;

    expire(c, now);
    check_attempts(c, now);
    pump(c, now);
    flush_all(c, now);

    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        wake = TERN_MIN(wake, r->deadline);
        if (r->state == TERN__REQ_SENT && !r->unasked &&
            c->opts.attempt_timeout_ms > 0 && c->n_servers > 1 &&
            follows_leader(c, r)) {
            wake = TERN_MIN(wake, attempt_wake(c, r));
        }
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
        } else if (s->state == TERN__CONN_TLS) {
            p->events = POLLIN;
            if (tern__server_want_write(s)) {
                p->events |= POLLOUT;
            }
            wake = TERN_MIN(wake, s->connect_deadline);
        } else if (s->state == TERN__CONN_READY ||
                   s->state == TERN__CONN_AUTH) {
            p->events = POLLIN;
            if (tern__server_want_write(s)) {
                p->events |= POLLOUT;
            }
            if (s->state == TERN__CONN_AUTH) {
                wake = TERN_MIN(wake, s->connect_deadline);
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
                rv = tern__server_finish_connect(s, now);
                if (rv != 0) {
                    server_fail(c, i, rv, now);
                    continue;
                }
                c->ever_connected = 1;
                if (s->state != TERN__CONN_READY) {
                    continue; /* TLS handshake under way */
                }
                if (server_up(c, i, now) != 0) {
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
        if (s->state == TERN__CONN_TLS) {
            if (re != 0) {
                rv = tern__server_handshake(s);
                if (rv != 0) {
                    server_fail(c, i, rv, now);
                } else if (server_up(c, i, now) == 0 &&
                           s->state == TERN__CONN_AUTH) {
                    rv = tern__server_flush(s);
                    if (rv != 0) {
                        server_fail(c, i, rv, now);
                    }
                }
            } else if (now >= s->connect_deadline) {
                tern_errmsg_printf(s->errmsg,
                                   "TLS with %s: no handshake before the "
                                   "connect timeout",
                                   s->addr);
                server_fail(c, i, -ETIMEDOUT, now);
            }
            continue;
        }
        if (s->state == TERN__CONN_AUTH && re == 0 &&
            now >= s->connect_deadline) {
            tern_errmsg_printf(s->errmsg,
                               "login to %s: no answer before the request "
                               "timeout",
                               s->addr);
            server_fail(c, i, -ETIMEDOUT, now);
            continue;
        }
        if ((re & POLLOUT) != 0 || tern__server_want_write(s)) {
            rv = tern__server_flush(s);
            if (rv != 0) {
                server_fail(c, i, rv, now);
                continue;
            }
        }
        if ((re & (POLLIN | POLLHUP | POLLERR)) != 0) {
            size_t before = s->in_len;
            rv = tern__server_read(s);
            if (rv == 0 && s->in_len > before) {
                /* A sign of life (attempt deadlines). */
                s->last_rx = now;
                s->probe_pending = 0;
                s->silent_until = 0;
            }
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

/* ---- Synchronous runs, leader discovery, async submission ---- */

/* Run r (already encoded) to completion. r stays owned by the caller. */
int tern__run_sync(struct tern_client *c, struct tern__req *r)
{
    list_append(c, r);
    return tern__run_sync_listed(c, r);
}

void tern__start_sync(struct tern_client *c, struct tern__req *r)
{
    int64_t now = tern__now_ms();
    list_append(c, r);
    pump(c, now);
    flush_all(c, now);
}

void tern__req_cancel(struct tern_client *c, struct tern__req *r)
{
    if (r->state != TERN__REQ_DONE) {
        req_complete(c, r, TERN_ECANCELED);
    }
    tern__req_free(r);
}

void tern__req_ask(struct tern__req *r, int64_t deadline)
{
    r->unasked = 0;
    r->deadline = deadline;
    if (r->state == TERN__REQ_SENT) {
        r->sent_at = tern__now_ms();
    }
}

int tern__run_sync_listed(struct tern_client *c, struct tern__req *r)
{
    while (r->state != TERN__REQ_DONE) {
        int rv = tern__step(c, r->deadline);
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
        struct tern__req *r = tern__req_new(c, PROTO_OP_STATUS, 0);
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
            tern__run_sync(c, r) != 0 ||
            proto_decode_status_resp(r->body, r->body_len, &st) != 0) {
            tern__req_free(r);
            c->leader = next_server(c, at);
            continue;
        }
        if (st.leader_id != 0 && st.leader_id == st.node_id) {
            c->leader = at;
            c->leader_confirmed = 1;
        } else if (st.leader_address_len > 0) {
            int to = tern__find_or_add_server(c, st.leader_address,
                                              st.leader_address_len);
            c->leader = to >= 0 && to != at ? to : next_server(c, at);
        } else {
            c->leader = next_server(c, at);
        }
        tern__req_free(r);
    }
    c->errmsg[0] = '\0';
}

void tern__find_leader(struct tern_client *c)
{
    if (c->opts.read_from == TERN_READ_LEADER && !c->leader_confirmed) {
        discover_leader(c);
    }
}

void tern__submit_async(struct tern_client *c, struct tern__req *r)
{
    r->is_async = 1;
    r->deadline = INT64_MAX; /* set at admission to the window */
    list_append(c, r);
    c->async_pending++;
}

void tern__cancel_all(struct tern_client *c)
{
    while (c->head != NULL) {
        req_complete(c, c->head, TERN_ECANCELED);
    }
    (void)fire_completions(c);
}
