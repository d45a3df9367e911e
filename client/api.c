/*
 * libtern's public calls (<tern/tern.h>): client lifetime and options,
 * and for each call, its argument checks, the request it builds with the
 * protocol's encoders (proto_encode_*), and the result it reads from the
 * answer. The request engine (engine.c) drives every request to its
 * answer; the producer state (producer.c) numbers produce batches.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "client_int.h"

#define TERN__DEFAULT_CONNECT_TIMEOUT_MS 1000
#define TERN__DEFAULT_REQUEST_TIMEOUT_MS 5000
#define TERN__DEFAULT_BACKOFF_MS         25
#define TERN__DEFAULT_WINDOW             32
#define TERN__DEFAULT_ATTEMPT_TIMEOUT_MS 300
#define TERN__DEFAULT_MERGE_BYTES        65536
/* Calls merged into one batch at most, and how far back from the end of
 * the request list produce_merge looks for the batch to grow. */
#define TERN__MERGE_MAX_CALLS         1024u
#define TERN__MERGE_SCAN              64
#define TERN__FETCH_MAX_BYTES_DEFAULT (1u << 20)

/* ---- Client lifetime ---- */

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
    o->attempt_timeout_ms = TERN__DEFAULT_ATTEMPT_TIMEOUT_MS;
    o->produce_merge_bytes = TERN__DEFAULT_MERGE_BYTES;
}

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
    c->pq_max = TERN__PQ_MAX;
    tern_list_init(&c->pq_lru);
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
        if (opts->attempt_timeout_ms != 0) {
            c->opts.attempt_timeout_ms = opts->attempt_timeout_ms;
        }
        if (opts->fetch_read_ahead != 0) {
            c->opts.fetch_read_ahead = opts->fetch_read_ahead;
        }
        if (opts->produce_merge_bytes != 0) {
            c->opts.produce_merge_bytes = opts->produce_merge_bytes;
        }
    }
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
            if (tern__find_or_add_server(c, a, alen) < 0) {
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
    tern__cancel_all(c); /* the read-ahead too: it is on the list */
    tern__req_free(c->ahead);
    for (int i = 0; i < c->n_servers; i++) {
        tern__server_free(c->servers[i]);
        tern_free(c->servers[i]);
    }
    tern__pq_free_all(c);
    tern__auth_free(c->auth);
    tern_free(c->servers);
    tern_free(c->pfds);
    auth_tls_ctx_free(c->tls_ctx);
    tern_free(c);
}

/* Drop the fetch read-ahead (off the wire; a late answer is dropped). */
static void fetch_ahead_drop(struct tern_client *c)
{
    if (c->ahead != NULL) {
        tern__req_cancel(c, c->ahead);
        c->ahead = NULL;
    }
}

int tern_client_set_tls(struct tern_client *c,
                        const char *ca_file,
                        const char *cert_file,
                        const char *key_file)
{
    struct auth_tls_ctx_options o;
    struct auth_tls_ctx *ctx = NULL;
    int rv;

    if (c == NULL) {
        return TERN_EINVAL;
    }
    if (ca_file == NULL || ca_file[0] == '\0') {
        tern_errmsg_printf(c->errmsg,
                           "TLS needs a CA file to verify the servers with");
        return TERN_EINVAL;
    }
    memset(&o, 0, sizeof o);
    o.role = AUTH_TLS_CLIENT;
    o.ca_file = ca_file;
    o.cert_file = cert_file != NULL && cert_file[0] != '\0' ? cert_file : NULL;
    o.key_file = key_file != NULL && key_file[0] != '\0' ? key_file : NULL;
    rv = auth_tls_ctx_new(&o, &ctx, c->errmsg);
    if (rv != 0) {
        return rv;
    }
    /* Connections made so far were plaintext (or used the old files); a
     * read-ahead asked on them is not the new connections' answer. */
    fetch_ahead_drop(c);
    for (int i = 0; i < c->n_servers; i++) {
        tern__server_close(c->servers[i]);
    }
    auth_tls_ctx_free(c->tls_ctx);
    c->tls_ctx = ctx;
    return 0;
}

void tern_auth_options_init(struct tern_auth_options *o)
{
    memset(o, 0, sizeof *o);
    o->mechanism = TERN_AUTH_NONE;
}

static char *dup_or_null(const char *s, int *failed)
{
    char *d;
    if (s == NULL) {
        return NULL;
    }
    d = tern_strdup(s);
    if (d == NULL) {
        *failed = 1;
    }
    return d;
}

int tern_client_set_auth(struct tern_client *c,
                         const struct tern_auth_options *o)
{
    struct tern__auth *a = NULL;
    const char *ns;
    int failed = 0;

    if (c == NULL) {
        return TERN_EINVAL;
    }
    c->errmsg[0] = '\0';
    if (o != NULL && o->mechanism != TERN_AUTH_NONE) {
        ns = o->ns != NULL ? o->ns : "";
        if (o->mechanism != TERN_AUTH_SCRAM &&
            o->mechanism != TERN_AUTH_EXTERNAL) {
            tern_errmsg_printf(c->errmsg, "unknown authentication mechanism %d",
                               o->mechanism);
            return TERN_EINVAL;
        }
        if (o->mechanism == TERN_AUTH_SCRAM &&
            (o->user == NULL || o->user[0] == '\0' || o->password == NULL ||
             o->password[0] == '\0')) {
            tern_errmsg_printf(c->errmsg, "SCRAM needs a user and a password");
            return TERN_EINVAL;
        }
        if (o->mechanism == TERN_AUTH_EXTERNAL && c->tls_ctx == NULL) {
            tern_errmsg_printf(c->errmsg,
                               "certificate login needs TLS with a client "
                               "certificate (tern_client_set_tls first)");
            return TERN_EINVAL;
        }
        if (o->user != NULL && o->user[0] != '\0' &&
            (strlen(o->user) > PROTO_MAX_USER ||
             !tern_name_valid(o->user, strlen(o->user)))) {
            tern_errmsg_printf(c->errmsg,
                               "user \"%.64s\": 1..%u bytes of "
                               "[A-Za-z0-9._-]",
                               o->user, PROTO_MAX_USER);
            return TERN_EINVAL;
        }
        if (ns[0] != '\0' && (strlen(ns) > PROTO_MAX_NAMESPACE ||
                              !tern_name_valid(ns, strlen(ns)))) {
            tern_errmsg_printf(c->errmsg,
                               "namespace \"%.64s\": 1..%u bytes of "
                               "[A-Za-z0-9._-]",
                               ns, PROTO_MAX_NAMESPACE);
            return TERN_EINVAL;
        }
        a = tern_calloc(1, sizeof *a);
        if (a == NULL) {
            return -ENOMEM;
        }
        a->mechanism = o->mechanism;
        a->user = o->user != NULL && o->user[0] != '\0'
                      ? dup_or_null(o->user, &failed)
                      : NULL;
        a->password = o->mechanism == TERN_AUTH_SCRAM
                          ? dup_or_null(o->password, &failed)
                          : NULL;
        a->ns = dup_or_null(ns, &failed);
        if (failed) {
            tern__auth_free(a);
            return -ENOMEM;
        }
    }
    /* Connections open so far logged in as someone else (or not at all),
     * and a read-ahead was asked as them: the new identity asks afresh. */
    fetch_ahead_drop(c);
    for (int i = 0; i < c->n_servers; i++) {
        tern__server_close(c->servers[i]);
    }
    tern__auth_free(c->auth);
    c->auth = a;
    return 0;
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

/* ---- Synchronous calls ---- */

/* Every synchronous call starts here: refused from a completion callback
 * (it would re-enter the engine); otherwise clears c's errmsg. */
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

/* Encoding r's frame failed with rv: explain it in c's errmsg (what names
 * the call or queue), free r, return rv. */
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
    tern__req_free(r);
    return rv;
}

/* Declared in client_int.h. */
int tern__sync_call(struct tern_client *c,
                    struct tern__req *r,
                    int enc,
                    const char *what,
                    int (*done)(struct tern__req *r, void *out),
                    void *out)
{
    int rv;
    if (enc != 0) {
        return encode_fail(c, r, enc, what);
    }
    rv = tern__run_sync(c, r);
    if (rv == 0 && done != NULL) {
        rv = done(r, out);
    }
    tern__req_free(r);
    return rv;
}

/* Declared in client_int.h. */
int tern__sync_req_new(struct tern_client *c,
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
        tern__find_leader(c);
    }
    *out = tern__req_new(c, op, extra_ms);
    return *out != NULL ? 0 : -ENOMEM;
}

int tern__sync_req_at(struct tern_client *c,
                      uint8_t op,
                      uint32_t extra_ms,
                      const char *address,
                      struct tern__req **out)
{
    int rv = tern__sync_req_new(c, op, extra_ms, address == NULL, out);
    if (rv != 0 || address == NULL) {
        return rv;
    }
    (*out)->target = tern__find_or_add_server(c, address, strlen(address));
    if ((*out)->target < 0) {
        tern_errmsg_printf(c->errmsg, "bad server address \"%s\"", address);
        tern__req_free(*out);
        *out = NULL;
        return TERN_EINVAL;
    }
    return 0;
}

static int queue_op(struct tern_client *c, uint8_t op, const char *queue)
{
    struct tern__req *r;
    int rv = tern__sync_req_new(c, op, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_queue_op(&r->frame, op, 0, queue);
    return tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)", NULL,
                           NULL);
}

int tern_queue_create(struct tern_client *c, const char *queue)
{
    return queue_op(c, PROTO_OP_QUEUE_CREATE, queue);
}

int tern_queue_delete(struct tern_client *c, const char *queue)
{
    return queue_op(c, PROTO_OP_QUEUE_DELETE, queue);
}

/* Ask for one page (after: NULL or a name) and append it to l. */
static int queue_list_step(struct tern_client *c,
                           const char *after,
                           uint32_t max_count,
                           struct tern_queue_list *l,
                           int *more)
{
    struct tern__req *r;
    int rv = tern__sync_req_new(c, PROTO_OP_QUEUE_LIST, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_queue_list_req(&r->frame, 0, after, max_count);
    if (rv != 0) {
        return encode_fail(c, r, rv, after != NULL ? after : "queue list");
    }
    rv = tern__run_sync(c, r);
    if (rv == 0) {
        rv = tern__queue_list_add(l, r->body, r->body_len, more);
        if (rv == TERN_EMALFORMED) {
            tern_errmsg_printf(c->errmsg, "queue list: bad answer");
        }
    }
    tern__req_free(r);
    return rv;
}

int tern_queue_list_page(struct tern_client *c,
                         const char *after,
                         uint32_t max_count,
                         struct tern_queue_list **out,
                         int *more)
{
    struct tern_queue_list *l;
    int m = 0;
    int rv;
    *out = NULL;
    if (more != NULL) {
        *more = 0;
    }
    l = tern__queue_list_new_empty();
    if (l == NULL) {
        return -ENOMEM;
    }
    rv = queue_list_step(c, after, max_count, l, &m);
    if (rv != 0) {
        tern_queue_list_free(l);
        return rv;
    }
    *out = l;
    if (more != NULL) {
        *more = m;
    }
    return 0;
}

int tern_queue_list(struct tern_client *c, struct tern_queue_list **out)
{
    struct tern_queue_list *l;
    char after[TERN_NAME_MAX + 1] = "";
    int more = 1;
    int rv = 0;
    *out = NULL;
    l = tern__queue_list_new_empty();
    if (l == NULL) {
        return -ENOMEM;
    }
    while (more) {
        size_t n0 = tern_queue_list_count(l);
        const char *last;
        rv = queue_list_step(c, after[0] != '\0' ? after : NULL, 0, l, &more);
        if (rv != 0) {
            break;
        }
        if (!more) {
            break;
        }
        /* A page that says "more" must list something beyond after. */
        last = tern_queue_list_count(l) > n0
                   ? tern_queue_list_name(l, tern_queue_list_count(l) - 1)
                   : NULL;
        if (last == NULL || strcmp(last, after) <= 0 ||
            strlen(last) > TERN_NAME_MAX) {
            tern_errmsg_printf(c->errmsg, "queue list: page does not advance");
            rv = TERN_EMALFORMED;
            break;
        }
        memcpy(after, last, strlen(last) + 1);
    }
    if (rv != 0) {
        tern_queue_list_free(l);
        return rv;
    }
    *out = l;
    return 0;
}

/* ---- Queue retention ---- */

/* QUEUE_CREATE (the plain create when every field of o is default) or
 * QUEUE_UPDATE (refused when no field is set) with the settings of o. */
static int queue_settings_call(struct tern_client *c,
                               uint8_t op,
                               const char *queue,
                               const struct tern_queue_options *o)
{
    struct proto_queue_settings s;
    struct tern__req *r;
    uint32_t mask = 0;
    int create = op == PROTO_OP_QUEUE_CREATE;
    int rv = check_call(c);
    if (rv != 0) {
        return rv;
    }
    rv = tern__queue_settings(o, &s, &mask);
    if (rv != 0 && create) {
        tern_errmsg_printf(c->errmsg,
                           "queue create: overflow %d is neither "
                           "drop-oldest nor reject",
                           o->overflow);
        return rv;
    }
    if (rv != 0 || (mask == 0 && !create)) {
        tern_errmsg_printf(c->errmsg, "queue update: %s",
                           rv != 0 ? "overflow is neither drop-oldest nor "
                                     "reject"
                                   : "no setting to change");
        return TERN_EINVAL;
    }
    if (mask == 0) {
        return tern_queue_create(c, queue);
    }
    rv = tern__sync_req_new(c, op, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = create ? proto_encode_queue_create(&r->frame, 0, queue, &s)
                : proto_encode_queue_update(&r->frame, 0, queue, mask, &s);
    return tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)", NULL,
                           NULL);
}

int tern_queue_create_opts(struct tern_client *c,
                           const char *queue,
                           const struct tern_queue_options *o)
{
    return queue_settings_call(c, PROTO_OP_QUEUE_CREATE, queue, o);
}

int tern_queue_update(struct tern_client *c,
                      const char *queue,
                      const struct tern_queue_options *o)
{
    return queue_settings_call(c, PROTO_OP_QUEUE_UPDATE, queue, o);
}

/* sync_call's done for QUEUE_INFO: out is a struct tern_queue_info **. */
static int info_done(struct tern__req *r, void *out)
{
    /* on_success validated the body: NULL means out of memory. */
    struct tern_queue_info **info = out;
    *info = tern__queue_info_new(r->body, r->body_len);
    return *info != NULL ? 0 : -ENOMEM;
}

int tern_queue_info(struct tern_client *c,
                    const char *queue,
                    struct tern_queue_info **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = tern__sync_req_new(c, PROTO_OP_QUEUE_INFO, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_queue_info_req(&r->frame, 0, queue);
    return tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)",
                           info_done, out);
}

/* sync_call's done for OFFSET_FOR_TIME: out is a uint64_t *. */
static int offset_done(struct tern__req *r, void *out)
{
    return proto_decode_offset_resp(r->body, r->body_len, out);
}

int tern_offset_for_time(struct tern_client *c,
                         const char *queue,
                         uint64_t time_ms,
                         uint64_t *offset)
{
    struct tern__req *r;
    int rv;
    *offset = 0;
    rv = tern__sync_req_new(c, PROTO_OP_OFFSET_FOR_TIME, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_offset_for_time(&r->frame, 0, queue, time_ms);
    return tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)",
                           offset_done, offset);
}

/* ---- Produce ---- */

/* proto_msg_at_cb over a struct tern_msg array (lengths checked against
 * max_frame, a uint32_t, by tern__produce_check). */
static void tern_msg_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    const struct tern_msg *t = (const struct tern_msg *)msgs + i;
    m->data = t->data;
    m->len = (uint32_t)t->len;
}

/* Build a PRODUCE request carrying (pid, seq): copies msgs into the
 * frame. */
/* Bytes msgs[0..n) take in a PRODUCE frame (length prefix and payload). */
static uint64_t msgs_wire_bytes(const struct tern_msg *msgs, size_t n)
{
    uint64_t b = 0;
    for (size_t k = 0; k < n; k++) {
        b += 4 + (uint64_t)msgs[k].len;
    }
    return b;
}

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
    r = tern__req_new(c, PROTO_OP_PRODUCE, 0);
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
        tern__req_free(r);
        return rv;
    }
    r->pid = pid;
    r->seq = seq;
    r->n_msgs = n;
    r->msg_sum = tern__batch_checksum(msgs, n);
    r->msg_bytes = msgs_wire_bytes(msgs, n);
    *out = r;
    return 0;
}

/* ---- Delayed produce ---- */

static int producer_init(struct tern_client *c);

/* proto_pmsg_at_cb over a struct tern_msg array: no properties. */
static void tern_msg_pat(const void *msgs,
                         uint32_t i,
                         struct proto_msg *m,
                         struct proto_msg *p)
{
    tern_msg_at(msgs, i, m);
    p->data = NULL;
    p->len = 0;
}

/* sync_call's done for PRODUCE_DELAYED: out is a uint64_t * (or NULL). */
static int delayed_done(struct tern__req *r, void *out)
{
    uint32_t count = 0;
    uint64_t due = 0;
    int rv =
        proto_decode_produce_delayed_resp(r->body, r->body_len, &count, &due);
    if (rv == 0 && out != NULL) {
        *(uint64_t *)out = due;
    }
    return rv;
}

/* PRODUCE_DELAYED with its when field (a delay, or PROTO_DELAY_AT and a
 * due time): the one call behind tern_produce_delayed and tern_produce_at.
 * Each call carries (producer id, seq) of the queue's delayed state, so a
 * resend after a lost answer or a leader change schedules nothing twice
 * (the leader answers the first due time). The delayed producer id is one
 * of the client's block, apart from the one of its PRODUCEs (whose
 * sequence numbers follow their own order); after a failed call the next
 * one takes a fresh id, so a batch whose outcome is unknown never leaves
 * a gap in front of the next. */
static int produce_delayed(struct tern_client *c,
                           const char *queue,
                           proto_pmsg_at_cb at,
                           const void *msgs,
                           size_t n,
                           uint64_t when,
                           uint64_t *out_due_ms)
{
    struct tern__pq *pq;
    struct tern__req *r;
    int rv;
    if (out_due_ms != NULL) {
        *out_due_ms = 0;
    }
    rv = check_call(c);
    if (rv != 0) {
        return rv;
    }
    if (n == 0 || msgs == NULL || n > UINT32_MAX) {
        tern_errmsg_printf(c->errmsg,
                           "delayed produce needs 1..2^32-1 messages");
        return TERN_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        struct proto_msg m, p;
        at(msgs, (uint32_t)i, &m, &p);
        if (m.len > c->opts.max_frame) {
            tern_errmsg_printf(c->errmsg,
                               "delayed produce to %s: message %zu is larger "
                               "than a frame",
                               queue != NULL ? queue : "(null)", i);
            return TERN_ETOOBIG;
        }
    }
    if (queue == NULL || !tern_name_valid(queue, strlen(queue))) {
        tern_errmsg_printf(c->errmsg, "delayed produce: bad queue name");
        return TERN_EBADNAME;
    }
    rv = producer_init(c);
    if (rv != 0) {
        return rv;
    }
    pq = tern__pq_get(c, queue);
    if (pq == NULL) {
        return -ENOMEM;
    }
    if (pq->delayed_pid == 0) {
        pq->delayed_pid = tern__producer_id_next(c);
        pq->delayed_seq = 1;
    }
    rv = tern__sync_req_new(c, PROTO_OP_PRODUCE_DELAYED, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv =
        proto_encode_produce_delayed(&r->frame, 0, queue, when, pq->delayed_pid,
                                     pq->delayed_seq, at, msgs, (uint32_t)n);
    if (rv == 0 && r->frame.len - PROTO_HEADER_SIZE > c->opts.max_frame) {
        rv = TERN_ETOOBIG;
    }
    r->n_msgs = n;
    tern__pq_hold(pq); /* the call may run callbacks that make states */
    rv = tern__sync_call(c, r, rv, queue, delayed_done, out_due_ms);
    tern__pq_release(pq);
    if (rv == 0) {
        pq->delayed_seq++;
    } else {
        pq->delayed_pid = 0;
    }
    return rv;
}

/* The when field of PRODUCE_DELAYED for ms (a delay, or with at a due
 * time): 0 and *when, or TERN_EINVAL (errmsg) when ms uses the field's
 * flag bits. */
static int when_field(struct tern_client *c,
                      uint64_t ms,
                      bool at,
                      uint64_t *when)
{
    if ((ms & (PROTO_DELAY_AT | PROTO_DELAY_DEDUP)) != 0) {
        tern_errmsg_printf(c->errmsg, "%s %llu%s is out of range",
                           at ? "due time" : "delay", (unsigned long long)ms,
                           at ? "" : " ms");
        return TERN_EINVAL;
    }
    *when = at ? ms | PROTO_DELAY_AT : ms;
    return 0;
}

int tern_produce_delayed(struct tern_client *c,
                         const char *queue,
                         const struct tern_msg *msgs,
                         size_t n,
                         uint64_t delay_ms,
                         uint64_t *out_due_ms)
{
    uint64_t when;
    int rv = when_field(c, delay_ms, false, &when);
    return rv != 0 ? rv
                   : produce_delayed(c, queue, tern_msg_pat, msgs, n, when,
                                     out_due_ms);
}

int tern_produce_at(struct tern_client *c,
                    const char *queue,
                    const struct tern_msg *msgs,
                    size_t n,
                    uint64_t due_ms,
                    uint64_t *out_due_ms)
{
    uint64_t when;
    int rv = when_field(c, due_ms, true, &when);
    return rv != 0 ? rv
                   : produce_delayed(c, queue, tern_msg_pat, msgs, n, when,
                                     out_due_ms);
}

/* ---- Produce with properties ---- */

/* The messages of a tern_produce_messages batch for
 * proto_encode_produce_props: data from msgs, blocks at pbuf + off[i]. */
struct pmsgs
{
    const struct tern_message *msgs;
    const uint8_t *pbuf;
    const size_t *off;
    const size_t *len;
};

static void pmsg_at(const void *arg,
                    uint32_t i,
                    struct proto_msg *m,
                    struct proto_msg *p)
{
    const struct pmsgs *x = arg;
    m->data = x->msgs[i].data;
    m->len = (uint32_t)x->msgs[i].len;
    p->data = x->pbuf + x->off[i];
    p->len = (uint32_t)x->len[i];
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void produce_base_out(const struct tern__req *r, uint64_t *base_offset);

/* A batch of tern_messages made ready to send: plain[i] the payloads,
 * pbuf the properties blocks (block i at off[i], len[i] bytes, 0 = none),
 * props whether some message has a block. Owned; props_free frees. */
struct props_batch
{
    struct tern_msg *plain;
    size_t *off;
    size_t *len;
    struct tern_wbuf pbuf;
    bool props;
};

/* Fill b for msgs[0..n) (n >= 1). 0, -ENOMEM, or the refusal of a
 * property over a limit (errmsg). b is props_free'd by the caller either
 * way. */
static int props_build(struct tern_client *c,
                       const struct tern_message *msgs,
                       size_t n,
                       uint64_t now,
                       struct props_batch *b)
{
    memset(b, 0, sizeof *b);
    tern_wbuf_init(&b->pbuf);
    b->plain = tern_calloc(n, sizeof *b->plain);
    b->off = tern_calloc(n, sizeof *b->off);
    b->len = tern_calloc(n, sizeof *b->len);
    if (b->plain == NULL || b->off == NULL || b->len == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        b->plain[i].data = msgs[i].data;
        b->plain[i].len = msgs[i].len;
        b->off[i] = b->pbuf.len;
        if (tern__props_has(&msgs[i])) {
            int rv = tern__props_encode(&msgs[i], i, now, &b->pbuf, c->errmsg);
            if (rv != 0) {
                return rv;
            }
            b->props = true;
        }
        b->len[i] = b->pbuf.len - b->off[i];
    }
    return 0;
}

static void props_free(struct props_batch *b)
{
    tern_free(b->len);
    tern_free(b->off);
    tern_free(b->plain);
    tern_wbuf_free(&b->pbuf);
}

/* tern_produce_messages_delayed and _at: when as produce_delayed's. */
static int produce_messages_delayed(struct tern_client *c,
                                    const char *queue,
                                    const struct tern_message *msgs,
                                    size_t n,
                                    uint64_t when,
                                    uint64_t *out_due_ms)
{
    struct props_batch b;
    int rv;
    if (n == 0 || msgs == NULL || n > UINT32_MAX) {
        tern_errmsg_printf(c->errmsg,
                           "delayed produce needs 1..2^32-1 messages");
        return TERN_EINVAL;
    }
    rv = props_build(c, msgs, n, wall_ms(), &b);
    if (rv == 0) {
        struct pmsgs x = {msgs, b.pbuf.base, b.off, b.len};
        rv = produce_delayed(c, queue, pmsg_at, &x, n, when, out_due_ms);
    }
    props_free(&b);
    return rv;
}

int tern_produce_messages_delayed(struct tern_client *c,
                                  const char *queue,
                                  const struct tern_message *msgs,
                                  size_t n,
                                  uint64_t delay_ms,
                                  uint64_t *out_due_ms)
{
    uint64_t when;
    int rv = when_field(c, delay_ms, false, &when);
    return rv != 0
               ? rv
               : produce_messages_delayed(c, queue, msgs, n, when, out_due_ms);
}

int tern_produce_messages_at(struct tern_client *c,
                             const char *queue,
                             const struct tern_message *msgs,
                             size_t n,
                             uint64_t due_ms,
                             uint64_t *out_due_ms)
{
    uint64_t when;
    int rv = when_field(c, due_ms, true, &when);
    return rv != 0
               ? rv
               : produce_messages_delayed(c, queue, msgs, n, when, out_due_ms);
}

int tern_produce_messages(struct tern_client *c,
                          const char *queue,
                          const struct tern_message *msgs,
                          size_t n,
                          uint64_t *base_offset)
{
    struct props_batch b;
    struct tern__req *r = NULL;
    struct tern__pq *pq;
    uint64_t now = wall_ms();
    int rv = check_call(c);
    if (rv != 0) {
        return rv;
    }
    if (n == 0 || msgs == NULL || n > UINT32_MAX) {
        tern_errmsg_printf(c->errmsg, "produce needs 1..2^32-1 messages");
        return TERN_EINVAL;
    }
    rv = props_build(c, msgs, n, now, &b);
    if (rv != 0) {
        goto out;
    }
    if (!b.props) {
        rv = tern_produce(c, queue, b.plain, n, base_offset);
        goto out;
    }
    rv = tern__produce_check(c, queue, b.plain, n, &pq);
    if (rv == 0) {
        tern__pq_hold(pq); /* producer_init may run callbacks */
        rv = producer_init(c);
        tern__pq_release(pq);
    }
    if (rv != 0) {
        goto out;
    }
    if (pq->producer_id == 0) {
        pq->producer_id = tern__pq_first_id(c);
    }
    r = tern__req_new(c, PROTO_OP_PRODUCE, 0);
    if (r == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    struct pmsgs x = {msgs, b.pbuf.base, b.off, b.len};
    rv = proto_encode_produce_props(&r->frame, 0, queue, pq->producer_id,
                                    pq->next_seq, pmsg_at, &x, (uint32_t)n);
    if (rv == 0 && r->frame.len - PROTO_HEADER_SIZE > c->opts.max_frame) {
        rv = TERN_ETOOBIG;
    }
    if (rv != 0) {
        tern_errmsg_printf(c->errmsg, "produce to %s: %s", queue,
                           tern_strerror(rv));
        goto out;
    }
    r->pid = pq->producer_id;
    r->seq = pq->next_seq;
    r->n_msgs = n;
    r->msg_sum = tern__batch_checksum(b.plain, n);
    r->pq = pq;
    tern__pq_hold(pq);
    pq->next_seq++;
    rv = tern__run_sync(c, r);
    if (rv == 0) {
        produce_base_out(r, base_offset);
    }
out:
    if (r != NULL) {
        tern__req_free(r);
    }
    props_free(&b);
    return rv;
}

/* Before the first produce: ask the leader for the client's producer id
 * block (PRODUCER_INIT, one synchronous round trip), or fall back to a
 * random id when the server does not know the op (TERN_EINVAL, "unknown
 * request op": a server before issued ids). 0 at once when the id is
 * known; otherwise 0 or the error (errmsg on c): the produce fails and
 * the next one asks again. */
static int producer_init(struct tern_client *c)
{
    struct tern__req *r;
    uint64_t pid = 0;
    int rv;
    if (c->pid_state != TERN__PID_UNKNOWN) {
        return 0;
    }
    if (c->in_callback) {
        /* Cannot happen (a callback follows a produce that knew the id),
         * but a synchronous round trip must never run in one. */
        tern_errmsg_printf(c->errmsg, "producer id unknown in a callback");
        return TERN_EINVAL;
    }
    r = tern__req_new(c, PROTO_OP_PRODUCER_INIT, 0);
    if (r == NULL) {
        return -ENOMEM;
    }
    rv = proto_encode_simple(&r->frame, PROTO_OP_PRODUCER_INIT, 0);
    if (rv != 0) {
        return encode_fail(c, r, rv, "producer id");
    }
    rv = tern__run_sync(c, r);
    if (rv == 0) {
        /* on_success checked the answer (non-zero, low half 0). */
        rv = proto_decode_producer_init_resp(r->body, r->body_len, &pid);
    }
    tern__req_free(r);
    if (rv == TERN_EINVAL) {
        c->producer_id = tern__producer_id_new();
        c->pid_state = TERN__PID_RANDOM;
        c->errmsg[0] = '\0';
        return 0;
    }
    if (rv != 0) {
        char why[TERN_ERRMSG_SIZE];
        memcpy(why, c->errmsg, sizeof why);
        tern_errmsg_printf(c->errmsg, "producer id from the leader: %.200s",
                           why);
        return rv;
    }
    c->producer_id = pid;
    c->pid_state = TERN__PID_ISSUED;
    c->pid_next_k = 0;
    return 0;
}

/* Build a PRODUCE request that takes the next sequence number of the
 * queue, whose producer state pq tern__produce_check gave with the
 * checked messages. */
static int produce_new(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       struct tern__pq *pq,
                       struct tern__req **out)
{
    int rv;
    *out = NULL;
    tern__pq_hold(pq); /* producer_init may run callbacks */
    rv = producer_init(c);
    tern__pq_release(pq);
    if (rv != 0) {
        return rv;
    }
    if (pq->producer_id == 0) {
        /* Made before the client's id was known. */
        pq->producer_id = tern__pq_first_id(c);
    }
    rv = produce_build(c, queue, msgs, n, pq->producer_id, pq->next_seq, out);
    if (rv != 0) {
        return rv;
    }
    (*out)->pq = pq;
    tern__pq_hold(pq);
    pq->next_seq++;
    return 0;
}

/* *base_offset (OUT, may be NULL) of a successful produce: UINT64_MAX for
 * a duplicate whose offsets the server no longer remembers. */
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
    struct tern__pq *pq;
    struct tern__req *r;
    int rv = check_call(c);
    if (rv == 0) {
        rv = tern__produce_check(c, queue, msgs, n, &pq);
    }
    if (rv != 0) {
        return rv;
    }
    rv = produce_new(c, queue, msgs, n, pq, &r);
    if (rv != 0) {
        return rv;
    }
    rv = tern__run_sync(c, r);
    if (rv == 0) {
        produce_base_out(r, base_offset);
    }
    tern__req_free(r);
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
    rv = tern__resend_check(c, queue, msgs, n, &pq);
    if (rv != 0) {
        return rv;
    }
    rv = produce_build(c, queue, msgs, n, pq->unknown_pid, pq->unknown_seq, &r);
    if (rv != 0) {
        return rv;
    }
    r->resend_of = pq;
    tern__pq_hold(pq);
    rv = tern__run_sync(c, r);
    if (rv == 0) {
        produce_base_out(r, base_offset);
    }
    tern__req_free(r);
    return rv;
}

/* The batch an async produce to pq may join: the newest request of the
 * list, within TERN__MERGE_SCAN of its end, that carries a batch of pq;
 * it qualifies only while the window is full and it waits behind it,
 * never sent (so no server has seen its producer id and sequence) and
 * still the last sequence of its queue. NULL if none. (Calls made before
 * the engine ran, with room in the window, stay batches of their own.) */
static struct tern__req *merge_target(struct tern_client *c,
                                      const struct tern__pq *pq)
{
    struct tern__req *r = c->tail;
    if (c->async_admitted < (size_t)c->opts.max_in_flight) {
        return NULL; /* room in the window: no scan on the common path */
    }
    for (int k = 0; r != NULL && k < TERN__MERGE_SCAN; k++, r = r->prev) {
        if (r->pq != pq) {
            continue;
        }
        if (r->op != PROTO_OP_PRODUCE || !r->is_async || r->admitted ||
            r->state != TERN__REQ_QUEUED || r->attempts != 0 || r->id != 0 ||
            r->resend_of != NULL || r->pid != pq->producer_id ||
            r->seq + 1 != pq->next_seq) {
            return NULL;
        }
        return r;
    }
    return NULL;
}

/* Kafka's producer fills a batch while its requests are in flight; so
 * does this: an async produce whose queue already has a batch waiting
 * behind the full window (merge_target) joins that batch, up to
 * opts.produce_merge_bytes of messages and TERN__MERGE_MAX_CALLS calls,
 * instead of waiting as a batch of its own. The batch keeps its producer
 * id and sequence; each call keeps its callback and gets its own
 * messages' offsets (engine.c fire_parts). Returns 1 if merged (the call
 * is then pending), 0 if not (no target, over a bound, or no memory: the
 * call goes on as a batch of its own). */
static int produce_merge(struct tern_client *c,
                         struct tern__pq *pq,
                         const struct tern_msg *msgs,
                         size_t n,
                         tern_produce_cb cb,
                         void *arg)
{
    struct tern__req *r;
    uint64_t add;
    if (c->opts.produce_merge_bytes <= 0 || n > UINT32_MAX) {
        return 0;
    }
    r = merge_target(c, pq);
    if (r == NULL || r->n_parts >= TERN__MERGE_MAX_CALLS) {
        return 0;
    }
    add = msgs_wire_bytes(msgs, n);
    if (r->msg_bytes + add > (uint64_t)c->opts.produce_merge_bytes ||
        r->frame.len - PROTO_HEADER_SIZE + add > c->opts.max_frame) {
        return 0;
    }
    if (r->n_parts == r->parts_cap) {
        size_t cap_parts = r->parts_cap == 0 ? 4 : 2 * r->parts_cap;
        struct tern__part *p =
            tern_realloc(r->parts, cap_parts * sizeof *r->parts);
        if (p == NULL) {
            return 0;
        }
        r->parts = p;
        r->parts_cap = cap_parts;
    }
    if (proto_produce_append(&r->frame, tern_msg_at, msgs, (uint32_t)n) != 0) {
        return 0;
    }
    if (r->n_parts == 0) {
        r->parts[0] = (struct tern__part){r->cb, r->arg, r->n_msgs};
        r->n_parts = 1;
    }
    r->parts[r->n_parts++] = (struct tern__part){cb, arg, n};
    r->n_msgs += n;
    r->msg_bytes += add;
    r->msg_sum = 0; /* producer.c reads the sum from the frame if needed */
    c->async_pending++;
    return 1;
}

int tern_produce_async(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       tern_produce_cb cb,
                       void *arg)
{
    struct tern__pq *pq;
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
    rv = tern__produce_check(c, queue, msgs, n, &pq);
    if (rv != 0) {
        return rv;
    }
    if (produce_merge(c, pq, msgs, n, cb, arg)) {
        return 0;
    }
    rv = produce_new(c, queue, msgs, n, pq, &r);
    if (rv != 0) {
        return rv;
    }
    r->cb = cb;
    r->arg = arg;
    tern__submit_async(c, r);
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
            int rv = tern__step(c, tern__now_ms() + 60000);
            if (rv < 0) {
                return rv;
            }
            fired += rv;
        }
        return fired;
    }
    until = tern__now_ms() + timeout_ms;
    do {
        int rv = tern__step(c, until);
        if (rv < 0) {
            return rv;
        }
        fired += rv;
    } while (fired == 0 && c->async_pending > 0 && tern__now_ms() < until);
    return fired;
}

/* ---- Fetch, consumer groups, status ---- */

/* sync_call's done for the fetch-like calls: out is a struct
 * tern_fetch_result ** that gets a new caller-owned result in r's result
 * mode. */
static int fetch_done(struct tern__req *r, void *out)
{
    /* on_success validated the body (and its skip tail). */
    struct tern_fetch_result **res = out;
    *res = tern__fetch_result_new(
        &r->body, r->body_len,
        r->result_mode | (r->runs ? TERN__RESULT_RUNS : 0));
    return *res != NULL ? 0 : -ENOMEM;
}

/* The flags and tag filter of o (tags: caller-owned rows for the parsed
 * tags). */
static int fetch_filter(struct tern_client *c,
                        const struct tern_fetch_options *o,
                        char tags[][TERN_TAG_MAX + 1],
                        const char **tp,
                        struct proto_fetch_filter *f)
{
    uint32_t n = 0;
    int rv = tern__tag_filter_parse(o->tags, tags, &n, c->errmsg);
    if (rv != 0) {
        return rv;
    }
    for (uint32_t i = 0; i < n; i++) {
        tp[i] = tags[i];
    }
    f->flags = o->properties ? PROTO_FETCH_PROPS : 0;
    f->tags = tp;
    f->n_tags = n;
    return 0;
}

/* Encode into r (from tern__req_new) the FETCH at offset (group NULL) or
 * GROUP_FETCH of group with options o and filter f0 (borrowed), and set
 * r's result mode and leader rule. A group fetch always asks for the skip
 * tail. 0 or the encoder's code. */
static int fetch_encode(struct tern_client *c,
                        struct tern__req *r,
                        const char *queue,
                        const char *group,
                        uint64_t offset,
                        const struct tern_fetch_options *o,
                        const struct proto_fetch_filter *f0)
{
    struct proto_fetch_filter f = *f0;
    r->result_mode = o->properties ? TERN__RESULT_PROPS : TERN__RESULT_PLAIN;
    if (group != NULL) {
        f.flags |= PROTO_GROUP_FETCH_SKIPPED;
        r->result_mode |= TERN__RESULT_SKIP;
    } else {
        /* A READ_LEADER fetch asks the server to answer only as a
         * writable leader, so a deposed leader redirects it (ENOTLEADER,
         * followed in on_error) instead of serving its own, possibly
         * older, queue end; its answer then confirms the leader like a
         * write's (on_success). */
        r->leader_only = c->opts.read_from == TERN_READ_LEADER;
        if (r->leader_only) {
            f.flags |= PROTO_FETCH_LEADER;
        }
    }
    return proto_encode_fetch_filtered(
        &r->frame, 0, queue, group, offset, o->max_msgs,
        o->max_bytes != 0 ? o->max_bytes : TERN__FETCH_MAX_BYTES_DEFAULT,
        o->wait_ms, &f);
}

/* A fetch answer from offset that stopped on a limit with more of the
 * queue left: it moved on and its next offset is below the queue's end. */
static int fetch_stopped_on_limit(const struct tern_fetch_result *res,
                                  uint64_t offset)
{
    uint64_t next = tern_fetch_result_next_offset(res);
    return next > offset && next < tern_fetch_result_end_offset(res);
}

/* Two FETCH requests that ask the same: op, mode and body bytes (the
 * header differs only in request id and checksum). */
static int same_fetch(const struct tern__req *a, const struct tern__req *b)
{
    return a->op == b->op && a->result_mode == b->result_mode &&
           a->leader_only == b->leader_only && a->frame.len == b->frame.len &&
           memcmp(a->frame.base + PROTO_HEADER_SIZE,
                  b->frame.base + PROTO_HEADER_SIZE,
                  a->frame.len - PROTO_HEADER_SIZE) == 0;
}

/* The read-ahead's answer for r (a plain FETCH from offset, encoded, not
 * sent) into *out (new, caller-owned): 1 when the read-ahead asked the
 * same and its answer stopped on a limit, else 0 (r then goes out
 * itself). Either way the read-ahead is used up. */
static int fetch_ahead_take(struct tern_client *c,
                            const struct tern__req *r,
                            uint64_t offset,
                            struct tern_fetch_result **out)
{
    struct tern__req *a = c->ahead;
    int got = 0;
    c->ahead = NULL;
    if (a == NULL) {
        return 0;
    }
    if (!same_fetch(a, r)) {
        tern__req_cancel(c, a);
        return 0;
    }
    tern__req_ask(a, r->deadline);
    if (tern__run_sync_listed(c, a) == 0 && fetch_done(a, out) == 0) {
        got = fetch_stopped_on_limit(*out, offset);
        if (!got) {
            tern_fetch_result_free(*out);
            *out = NULL;
        }
    }
    /* A failed read-ahead is not the caller's failure: r asks again. */
    c->errmsg[0] = '\0';
    tern__req_cancel(c, a);
    return got;
}

/* After a plain FETCH from offset answered res: when that answer stopped
 * on a limit and read-ahead is on (tern.h: by default not for
 * READ_LEADER, whose answers are the leader's state at the call), send the same
 * fetch from res's next offset now (c->ahead). Best effort: on ENOMEM there is
 * none. */
static void fetch_ahead_start(struct tern_client *c,
                              const char *queue,
                              uint64_t offset,
                              const struct tern_fetch_options *o,
                              const struct proto_fetch_filter *f,
                              const struct tern_fetch_result *res)
{
    struct tern__req *a;
    int on =
        c->opts.fetch_read_ahead > 0 || (c->opts.fetch_read_ahead == 0 &&
                                         c->opts.read_from != TERN_READ_LEADER);
    if (!on || !fetch_stopped_on_limit(res, offset)) {
        return;
    }
    a = tern__req_new(c, PROTO_OP_FETCH, o->wait_ms);
    if (a == NULL) {
        return;
    }
    if (fetch_encode(c, a, queue, NULL, tern_fetch_result_next_offset(res), o,
                     f) != 0) {
        tern__req_free(a);
        return;
    }
    /* Until a call asks for it, nobody waits: no deadline (the server may
     * answer while the caller works, and it is read at the next step) and
     * no attempt timeout (an unread answer is not a silent server). */
    a->unasked = 1;
    a->deadline = INT64_MAX;
    c->ahead = a;
    tern__start_sync(c, a);
}

/* FETCH at offset (group NULL) or GROUP_FETCH of group with options o
 * (borrowed): the one path of tern_fetch, tern_group_fetch and their _ex
 * forms. */
static int fetch_call(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      uint64_t offset,
                      const struct tern_fetch_options *o,
                      struct tern_fetch_result **out)
{
    char tags[TERN_FILTER_TAGS_MAX][TERN_TAG_MAX + 1];
    const char *tp[TERN_FILTER_TAGS_MAX];
    struct proto_fetch_filter f;
    struct tern__req *r;
    int rv;
    *out = NULL;
    rv = fetch_filter(c, o, tags, tp, &f);
    if (rv != 0) {
        return rv;
    }
    rv = tern__sync_req_new(
        c, group != NULL ? PROTO_OP_GROUP_FETCH : PROTO_OP_FETCH, o->wait_ms, 1,
        &r);
    if (rv != 0) {
        return rv;
    }
    rv = fetch_encode(c, r, queue, group, offset, o, &f);
    if (group != NULL) {
        return tern__sync_call(c, r, rv, "group fetch", fetch_done, out);
    }
    if (rv == 0 && fetch_ahead_take(c, r, offset, out)) {
        tern__req_free(r);
    } else {
        rv = tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)",
                             fetch_done, out);
    }
    if (rv == 0) {
        tern__fetch_result_set_start(*out, offset, 0);
        fetch_ahead_start(c, queue, offset, o, &f, *out);
    }
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
    struct tern_fetch_options o = {max_msgs, max_bytes, wait_ms, NULL, 0};
    return fetch_call(c, queue, NULL, offset, &o, out);
}

int tern_group_fetch(struct tern_client *c,
                     const char *queue,
                     const char *group,
                     uint32_t max_msgs,
                     uint32_t max_bytes,
                     uint32_t wait_ms,
                     struct tern_fetch_result **out)
{
    struct tern_fetch_options o = {max_msgs, max_bytes, wait_ms, NULL, 0};
    /* No group is not a name (TERN_EBADNAME, as for an empty one). */
    return fetch_call(c, queue, group != NULL ? group : "", 0, &o, out);
}

int tern_fetch_ex(struct tern_client *c,
                  const char *queue,
                  uint64_t offset,
                  const struct tern_fetch_options *o,
                  struct tern_fetch_result **out)
{
    if (o == NULL) {
        *out = NULL;
        return TERN_EINVAL;
    }
    return fetch_call(c, queue, NULL, offset, o, out);
}

int tern_group_fetch_ex(struct tern_client *c,
                        const char *queue,
                        const char *group,
                        const struct tern_fetch_options *o,
                        struct tern_fetch_result **out)
{
    if (o == NULL || group == NULL) {
        *out = NULL;
        return TERN_EINVAL;
    }
    return fetch_call(c, queue, group, 0, o, out);
}

/* A MESSAGE_GET by offset (queue_id 0), id or key. */
static int message_get(struct tern_client *c,
                       const char *queue,
                       uint64_t queue_id,
                       uint64_t offset,
                       const void *key,
                       size_t key_len,
                       uint32_t max,
                       struct tern_fetch_result **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    if (key != NULL && (key_len == 0 || key_len > TERN_KEY_MAX || max == 0 ||
                        max > TERN_MESSAGE_GET_MAX)) {
        tern_errmsg_printf(c->errmsg,
                           "message get: a key is 1..%d bytes and max "
                           "1..%d",
                           TERN_KEY_MAX, TERN_MESSAGE_GET_MAX);
        return TERN_EINVAL;
    }
    rv = tern__sync_req_new(c, PROTO_OP_MESSAGE_GET, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    r->result_mode = TERN__RESULT_GET;
    rv = proto_encode_message_get(&r->frame, 0, queue, queue_id, offset, key,
                                  (uint32_t)key_len, max);
    return tern__sync_call(c, r, rv, queue != NULL ? queue : "(null)",
                           fetch_done, out);
}

int tern_message_get_offset(struct tern_client *c,
                            const char *queue,
                            uint64_t offset,
                            struct tern_fetch_result **out)
{
    return message_get(c, queue, 0, offset, NULL, 0, 0, out);
}

/* n hex digits at s into *v; 0 or -1. */
static int hex_u64(const char *s, uint64_t *v)
{
    *v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (d < 0) {
            return -1;
        }
        *v = (*v << 4) | (uint64_t)d;
    }
    return 0;
}

int tern_message_get_id(struct tern_client *c,
                        const char *queue,
                        const char *id,
                        struct tern_fetch_result **out)
{
    uint64_t qid, off;
    *out = NULL;
    if (id == NULL ||
        strnlen(id, TERN_MESSAGE_ID_LEN + 1) != TERN_MESSAGE_ID_LEN ||
        hex_u64(id, &qid) != 0 || hex_u64(id + 16, &off) != 0 || qid == 0) {
        tern_errmsg_printf(c->errmsg,
                           "message id \"%.40s\": %d hex digits (queue id, "
                           "offset)",
                           id != NULL ? id : "(null)", TERN_MESSAGE_ID_LEN);
        return TERN_EINVAL;
    }
    return message_get(c, queue, qid, off, NULL, 0, 0, out);
}

int tern_message_get_key(struct tern_client *c,
                         const char *queue,
                         const void *key,
                         size_t key_len,
                         uint32_t max,
                         struct tern_fetch_result **out)
{
    if (key == NULL) {
        *out = NULL;
        tern_errmsg_printf(c->errmsg, "message get: no key");
        return TERN_EINVAL;
    }
    return message_get(c, queue, 0, 0, key, key_len, max, out);
}

int tern_group_commit(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      uint64_t next_offset)
{
    struct tern__req *r;
    int rv = tern__sync_req_new(c, PROTO_OP_GROUP_COMMIT, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_group_commit(&r->frame, 0, queue, group, next_offset);
    return tern__sync_call(c, r, rv, "group commit", NULL, NULL);
}

/* ---- Shared groups ---- */

int tern_shared_config(struct tern_client *c,
                       const char *queue,
                       const char *group,
                       const struct tern_shared_options *o)
{
    struct proto_shared_settings s = {0};
    uint32_t mask = 0;
    struct tern__req *r;
    int rv;
    if (o != NULL) {
        mask |= o->ack_timeout_ms != 0 ? PROTO_SHARED_SET_ACK_TIMEOUT : 0;
        mask |= o->max_deliveries != 0 ? PROTO_SHARED_SET_MAX_DELIVERIES : 0;
        mask |= o->window != 0 ? PROTO_SHARED_SET_WINDOW : 0;
        mask |= o->dlq != NULL && o->dlq[0] != '\0' ? PROTO_SHARED_SET_DLQ : 0;
        s.ack_timeout_ms = o->ack_timeout_ms;
        s.max_deliveries = o->max_deliveries;
        s.window = o->window;
        s.dlq = o->dlq;
    }
    rv = tern__sync_req_new(c, PROTO_OP_SHARED_CONFIG, 0, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_shared_config(&r->frame, 0, queue, group, mask, &s);
    return tern__sync_call(c, r, rv, "shared config", NULL, NULL);
}

int tern_receive(struct tern_client *c,
                 const char *queue,
                 const char *group,
                 uint32_t max_msgs,
                 uint32_t wait_ms,
                 struct tern_fetch_result **out)
{
    struct tern__req *r;
    int rv;
    *out = NULL;
    if (max_msgs == 0 || max_msgs > PROTO_SHARED_LIST_MAX) {
        tern_errmsg_printf(c->errmsg, "receive: max_msgs is 1..%u",
                           PROTO_SHARED_LIST_MAX);
        return TERN_EINVAL;
    }
    rv = check_call(c);
    if (rv == 0) {
        rv = producer_init(c);
    }
    if (rv != 0) {
        return rv;
    }
    rv = tern__sync_req_new(c, PROTO_OP_RECEIVE, wait_ms, 0, &r);
    if (rv != 0) {
        return rv;
    }
    r->result_mode = TERN__RESULT_RECV;
    rv = proto_encode_receive(&r->frame, 0, queue, group, c->producer_id,
                              max_msgs, wait_ms);
    return tern__sync_call(c, r, rv, "receive", fetch_done, out);
}

/* sync_call's done for tern_settle: out is the caller's items. */
static int settle_done(struct tern__req *r, void *out)
{
    struct tern_settle_item *items = out;
    const uint8_t *done;
    uint32_t n = 0;
    int rv = proto_decode_settle_resp(r->body, r->body_len, &done, &n);
    for (uint32_t i = 0; rv == 0 && i < n; i++) {
        items[i].done = done[i];
    }
    return rv;
}

int tern_settle(struct tern_client *c,
                const char *queue,
                const char *group,
                struct tern_settle_item *items,
                size_t n)
{
    struct proto_settle_item *pi;
    struct tern__req *r;
    int rv;
    if (items == NULL || n == 0 || n > PROTO_SHARED_LIST_MAX) {
        tern_errmsg_printf(c->errmsg, "settle: 1..%u items",
                           PROTO_SHARED_LIST_MAX);
        return TERN_EINVAL;
    }
    pi = tern_calloc(n, sizeof(*pi));
    if (pi == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        pi[i].offset = items[i].receipt.offset;
        pi[i].count = items[i].receipt.count;
        pi[i].action =
            (uint8_t)(items[i].action < 0 || items[i].action > TERN_SETTLE_RETRY
                          ? 255
                          : items[i].action);
        pi[i].delay_ms = items[i].delay_ms;
        items[i].done = 0;
    }
    rv = tern__sync_req_new(c, PROTO_OP_SETTLE, 0, 0, &r);
    if (rv != 0) {
        tern_free(pi);
        return rv;
    }
    r->n_msgs = n;
    rv = proto_encode_settle(&r->frame, 0, queue, group, pi, (uint32_t)n);
    tern_free(pi);
    if (rv == TERN_EINVAL) {
        tern__req_free(r);
        tern_errmsg_printf(c->errmsg,
                           "settle: receipts in increasing offset order, a "
                           "known action, no delay for ack, release and "
                           "retry");
        return rv;
    }
    return tern__sync_call(c, r, rv, "settle", settle_done, items);
}

/* ---- Single active consumer of stream groups ---- */

struct claim_out
{
    int *granted;
    uint64_t *holder;
    uint64_t *until_ms;
};

/* sync_call's done for tern_group_claim / tern_group_release. */
static int claim_done(struct tern__req *r, void *out)
{
    struct claim_out *o = out;
    uint8_t granted = 0;
    uint64_t holder = 0, until = 0;
    int rv = proto_decode_claim_resp(r->body, r->body_len, &granted, &holder,
                                     &until);
    if (rv == 0) {
        *o->granted = granted;
        *o->holder = holder;
        *o->until_ms = until;
    }
    return rv;
}

static int claim_call(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      uint8_t action,
                      uint32_t lease_ms,
                      struct claim_out *o)
{
    struct tern__req *r;
    int rv = check_call(c);
    if (rv == 0) {
        rv = producer_init(c);
    }
    if (rv == 0) {
        rv = tern__sync_req_new(c, PROTO_OP_CLAIM, 0, 0, &r);
    }
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_claim(&r->frame, 0, queue, group, c->producer_id, action,
                            lease_ms);
    return tern__sync_call(c, r, rv, "claim", claim_done, o);
}

int tern_group_claim(struct tern_client *c,
                     const char *queue,
                     const char *group,
                     uint32_t lease_ms,
                     int *granted,
                     uint64_t *holder,
                     uint64_t *until_ms)
{
    int g = 0;
    uint64_t h = 0, u = 0;
    struct claim_out o = {&g, &h, &u};
    int rv = claim_call(c, queue, group, PROTO_CLAIM_ACQUIRE, lease_ms, &o);
    if (granted != NULL) {
        *granted = g;
    }
    if (holder != NULL) {
        *holder = h;
    }
    if (until_ms != NULL) {
        *until_ms = u;
    }
    return rv;
}

int tern_group_release(struct tern_client *c,
                       const char *queue,
                       const char *group)
{
    int g = 0;
    uint64_t h = 0, u = 0;
    struct claim_out o = {&g, &h, &u};
    return claim_call(c, queue, group, PROTO_CLAIM_RELEASE, 0, &o);
}

uint64_t tern_client_consumer_id(const struct tern_client *c)
{
    return c->producer_id;
}

/* One STATUS request with flags to address (NULL: where reads go); *r
 * (OUT) is the finished request (caller-owned) when it ran. */
static int status_run(struct tern_client *c,
                      const char *address,
                      uint8_t flags,
                      struct tern__req **r)
{
    int rv = tern__sync_req_at(c, PROTO_OP_STATUS, 0, address, r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_status_req(&(*r)->frame, 0, flags);
    if (rv != 0) {
        rv = encode_fail(c, *r, rv, "status");
        *r = NULL;
        return rv;
    }
    return tern__run_sync(c, *r);
}

int tern_cluster_status(struct tern_client *c,
                        const char *address,
                        struct tern_status **out)
{
    struct tern__req *r = NULL;
    int rv;
    *out = NULL;
    rv = status_run(c, address, PROTO_STATUS_TIMERS, &r);
    if (rv == TERN_EMALFORMED && r != NULL) {
        /* A server that predates the timer tail refuses the flags byte:
         * ask again as before. */
        tern__req_free(r);
        r = NULL;
        rv = status_run(c, address, 0, &r);
    }
    if (rv == 0) {
        *out = tern__status_new(c->servers[r->answered_by]->addr, r->body,
                                r->body_len);
        if (*out == NULL) {
            rv = -ENOMEM;
        }
    }
    if (r != NULL) {
        tern__req_free(r);
    }
    return rv;
}

/* ---- Membership ---- */

static int member_done(struct tern__req *r, void *out)
{
    uint8_t role = 0;
    int rv = proto_decode_member_resp(r->body, r->body_len, &role);
    (void)out;
    return rv;
}

static int member_call(struct tern_client *c,
                       uint8_t action,
                       uint64_t id,
                       const char *raft_address,
                       const char *client_address,
                       uint32_t timeout_ms)
{
    struct tern__req *r;
    /* The leader answers once the change is done: wait for its bound. */
    uint32_t extra = action == PROTO_MEMBER_ADD
                         ? (timeout_ms != 0 ? timeout_ms : 120000u) + 5000u
                         : 30000u;
    int rv = tern__sync_req_new(c, PROTO_OP_MEMBER, extra, 0, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_member_req(&r->frame, 0, action, id, raft_address,
                                 client_address, timeout_ms);
    return tern__sync_call(c, r, rv, "cluster membership", member_done, NULL);
}

int tern_cluster_add(struct tern_client *c,
                     uint64_t id,
                     const char *raft_address,
                     const char *client_address,
                     uint32_t timeout_ms)
{
    return member_call(c, PROTO_MEMBER_ADD, id, raft_address, client_address,
                       timeout_ms);
}

int tern_cluster_remove(struct tern_client *c, uint64_t id)
{
    return member_call(c, PROTO_MEMBER_REMOVE, id, "", "", 0);
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

/* STATS with flags; the stage tail into stages[max] / *n_stages when
 * stages is not NULL. */
static int replication_stats(struct tern_client *c,
                             const char *address,
                             uint8_t flags,
                             struct tern_repl_stats *out,
                             struct tern_repl_stage *stages,
                             unsigned max,
                             unsigned *n_stages)
{
    struct tern__req *r;
    struct proto_stats st;
    const char *server;
    int rv;
    memset(out, 0, sizeof *out);
    if (n_stages != NULL) {
        *n_stages = 0;
    }
    rv = tern__sync_req_at(c, PROTO_OP_STATS, 0, address, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_stats_req(&r->frame, 0, flags);
    if (rv != 0) {
        return encode_fail(c, r, rv, "replication stats");
    }
    rv = tern__run_sync(c, r);
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
        for (unsigned i = 0; stages != NULL && i < st.n_stages && i < max;
             i++) {
            struct tern_repl_stage *o = &stages[i];
            copy_str(o->name, sizeof o->name, st.stages[i].name,
                     st.stages[i].name_len);
            o->count = st.stages[i].count;
            o->p50_ns = st.stages[i].p50_ns;
            o->p99_ns = st.stages[i].p99_ns;
            *n_stages = i + 1;
        }
    }
    tern__req_free(r);
    return rv;
}

int tern_replication_stats(struct tern_client *c,
                           const char *address,
                           int reset,
                           struct tern_repl_stats *out)
{
    return replication_stats(c, address, reset != 0 ? PROTO_STATS_RESET : 0,
                             out, NULL, 0, NULL);
}

int tern_replication_stages(struct tern_client *c,
                            const char *address,
                            int reset,
                            struct tern_repl_stats *out,
                            struct tern_repl_stage *stages,
                            unsigned max,
                            unsigned *n_stages)
{
    uint8_t flags = PROTO_STATS_STAGES;
    if (reset != 0) {
        flags |= PROTO_STATS_RESET;
    }
    return replication_stats(c, address, flags, out, stages, max, n_stages);
}
