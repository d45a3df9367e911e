/*
 * Write batching and result routing. Pure logic over callbacks (no libuv,
 * no repl), so tests/unit/node/test_batch.c drives it with a fake propose.
 *
 * Happy path (one loop iteration on the leader):
 *   1. every write request read in this iteration is added to the OPEN
 *      batch: one idx_cmd_* into one command entry (idx_cmd_begin stamped
 *      with the leader's clock; a new entry starts with a TERM command
 *      holding the node's current term, for message trace: 13 bytes, no
 *      request owns it, its result is skipped when routing);
 *   2. at the end of the iteration (node.c's uv_check) node_batcher_propose
 *      seals it (idx_cmd_end) and proposes it: ONE repl_propose for all of
 *      them. The batch moves to INFLIGHT, keyed by its raft index;
 *   3. the FSM applies the entry: node_batcher_on_apply finds the batch by
 *      index and copies the i-th idx_result to the i-th request;
 *   4. the propose callback (node_batcher_proposed, status 0) moves the
 *      batch to DONE;
 *   5. right before the next idx_flush (group commit),
 *      node_batcher_answer_produces answers the DONE batches' produces
 *      (their answer is the apply's result alone), then after it
 *      node_batcher_flushed answers the other requests (some read the
 *      index). The flush runs before the loop reads any further request,
 *      so an acknowledged message is visible to every fetch that can
 *      follow the acknowledgement.
 *
 * Bounds and backpressure: an entry is sealed at max_entry_bytes or
 * max_cmds (a single request bigger than the bound gets an entry of its
 * own); at most max_inflight proposals (and about max_inflight_bytes)
 * are outstanding, further sealed batches wait in QUEUED; with max_queued
 * batches queued the batcher is congested and the server stops reading from
 * clients.
 *
 * Reads behind a barrier (GROUP_FETCH): the request adds a READ_BARRIER
 * command (index/cmd.c) to the open entry and is answered like a write,
 * after the flush that covers its apply, by serving the fetch from the
 * index then (in the respond op: server.c). The entry commits only while this
 * node leads a majority, and everything committed before it is applied by then:
 * the read is linearizable, unlike a plain read from a leader that may
 * have been deposed without knowing it.
 *
 * Failure modes:
 *   - propose fails synchronously or its callback reports an error: every
 *     request of the batch is answered with that code at once
 *     (TERN_ELEADERSHIPLOST: outcome unknown; -ENOSPC becomes TERN_EFULL);
 *   - leadership changes and another leader's entry lands at our index:
 *     the applied bytes differ from ours (length + entry header, which
 *     carries the timestamp and a checksum of the entry), so results
 *     are NOT routed; repl then fails our callback;
 *   - callback status 0 without routed results (should not happen):
 *     TERN_EINTERNAL for each request;
 *   - the connection of a request goes away: the server keeps it
 *     referenced until every request is answered and drops the answers;
 *     the entry itself is unaffected.
 */
#include <errno.h>

#include <string.h>

#include <uv.h>

#include "batch.h"

void node_batcher_init(struct node_batcher *b,
                       const struct node_batcher_ops *ops,
                       void *arg)
{
    memset(b, 0, sizeof(*b));
    b->ops = *ops;
    b->arg = arg;
    b->max_entry_bytes = 4u << 20;
    b->max_cmds = NODE_MAX_CMDS_PER_ENTRY;
    b->max_inflight = 64;
    b->max_inflight_bytes = 64u << 20;
    b->max_queued = 8;
    tern_list_init(&b->queued);
    tern_list_init(&b->inflight);
    tern_list_init(&b->done);
}

static void batch_free(struct node_batch *batch)
{
    tern_wbuf_free(&batch->w);
    tern_free(batch);
}

/* Answer every request of batch with status (unless already set to a
 * result) and free the batch. batch must be on no list. */
/* Answer w (taken off its batch) and free it. */
static void wreq_answer(struct node_batcher *b, struct node_wreq *w)
{
    tern_list_remove(&w->link);
    b->ops.respond(w);
    tern_free(w->items);
    tern_free(w);
}

static void batch_answer(struct node_batch *batch, int status)
{
    struct node_batcher *b = batch->batcher;
    if (status == -ENOSPC) {
        status = TERN_EFULL;
    }
    while (!tern_list_empty(&batch->wreqs)) {
        struct node_wreq *w =
            TERN_CONTAINER(batch->wreqs.next, struct node_wreq, link);
        if (status != 0) {
            w->status = status;
        }
        wreq_answer(b, w);
    }
    batch_free(batch);
}

static struct node_batch *batch_new(struct node_batcher *b)
{
    struct node_batch *batch = tern_calloc(1, sizeof(*batch));
    if (batch == NULL) {
        return NULL;
    }
    tern_list_init(&batch->link);
    tern_list_init(&batch->wreqs);
    tern_wbuf_init(&batch->w);
    batch->batcher = b;
    batch->ts = b->ops.timestamp_ms(b->arg);
    idx_cmd_begin(&batch->w, batch->ts);
    if (b->ops.xxh3 != NULL && b->ops.xxh3(b->arg)) {
        idx_cmd_flag_xxh3(&batch->w);
    }
    uint64_t term = b->ops.term != NULL ? b->ops.term(b->arg) : 0;
    if (term > 0) {
        idx_cmd_term(&batch->w, term);
        batch->n_cmds = batch->n_lead = 1;
    }
    return batch;
}

/* Seal the open batch and queue it. */
static void seal_open(struct node_batcher *b)
{
    struct node_batch *batch = b->open;
    int rv;
    if (batch == NULL) {
        return;
    }
    b->open = NULL;
    rv = idx_cmd_end(&batch->w);
    if (rv == 0 && batch->w.err != 0) {
        rv = batch->w.err;
    }
    if (rv != 0) {
        batch_answer(batch, rv);
        return;
    }
    batch->len = batch->w.len;
    memcpy(batch->head, batch->w.base,
           TERN_MIN(batch->len, sizeof(batch->head)));
    /* repl_propose needs a multiple of 8 bytes (raft_uv 0.15, see
     * repl.h); idx_cmd_entry_len recovers the real length at apply. */
    idx_cmd_pad(&batch->w);
    if (batch->w.err != 0) {
        batch_answer(batch, batch->w.err);
        return;
    }
    tern_list_push(&b->queued, &batch->link);
    b->n_queued++;
}

/* A rough size of what r adds to an entry, to seal before the bound. */
static size_t request_size(const struct proto_request *r)
{
    return 64 + r->queue_len + r->group_len + r->msgs_len + r->props_len +
           (size_t)r->n_msgs * 8;
}

static void name_copy(char *dst, const char *src, uint16_t len)
{
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Open a batch for one more command unless the open one is full. */
static int open_for(struct node_batcher *b, size_t size)
{
    if (b->open != NULL && b->open->n_cmds > b->open->n_lead &&
        (b->open->n_cmds >= b->max_cmds ||
         b->open->w.len + size > b->max_entry_bytes)) {
        seal_open(b);
    }
    if (b->open == NULL) {
        b->open = batch_new(b);
        if (b->open == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* w's command was just added to the open entry: queue w with it. When
 * the entry buffer turned unusable (out of memory), the requests it holds
 * are answered with that error (their calls returned 0 before), and this
 * call fails: w is freed, never answered, as a failing call never fires
 * its callback (its caller answers, or counts a reference, only by the
 * code it gets). */
static int add_finish(struct node_batcher *b, struct node_wreq *w)
{
    if (b->open->w.err != 0) {
        struct node_batch *broken = b->open;
        int err = broken->w.err;
        b->open = NULL;
        batch_answer(broken, err);
        tern_free(w->items);
        tern_free(w);
        return err == -ENOSPC ? TERN_EFULL : err;
    }
    tern_list_push(&b->open->wreqs, &w->link);
    b->open->n_cmds++;
    return 0;
}

/* Names of the security metadata requests, NUL-terminated (proto.c has
 * validated them, bounds included). */
struct sec_names
{
    char user[PROTO_MAX_NAME + 1];
    char ns[PROTO_MAX_NAME + 1];
    char pattern[PROTO_MAX_NAME + 1];
};

/* The security metadata writes (docs/AUTH.md): one idx_cmd_* each.
 * PRODUCER_INIT's owner is r->user: the server sets it to the
 * connection's user ("" for the anonymous owner of a connection that did
 * not authenticate). */
static int add_security(struct node_batcher *b,
                        void *owner,
                        uint64_t request_id,
                        const struct proto_request *r)
{
    struct sec_names n;
    struct node_wreq *w;
    struct idx_quota q;
    int rv;
    if (r->user_len > PROTO_MAX_NAME || r->ns_len > PROTO_MAX_NAME ||
        r->pattern_len > PROTO_MAX_NAME || r->cred_len > IDX_CRED_MAX) {
        return TERN_EBADNAME;
    }
    name_copy(n.user, r->user != NULL ? r->user : "", r->user_len);
    name_copy(n.ns, r->ns != NULL ? r->ns : "", r->ns_len);
    name_copy(n.pattern, r->pattern != NULL ? r->pattern : "", r->pattern_len);
    w = tern_calloc(1, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    rv = open_for(b, 64 + 3 * PROTO_MAX_NAME + r->cred_len);
    if (rv != 0) {
        tern_free(w);
        return rv;
    }
    tern_list_init(&w->link);
    w->owner = owner;
    w->request_id = request_id;
    w->op = r->op;
    switch (r->op) {
    case PROTO_OP_USER_SET:
        idx_cmd_user_set(&b->open->w, n.user, r->bits, r->cred, r->cred_len);
        break;
    case PROTO_OP_USER_DELETE:
        idx_cmd_user_delete(&b->open->w, n.user);
        break;
    case PROTO_OP_ACL_SET:
        idx_cmd_acl_set(&b->open->w, n.user, n.ns, n.pattern, r->bits);
        break;
    case PROTO_OP_ACL_DELETE:
        idx_cmd_acl_delete(&b->open->w, n.user, n.ns, n.pattern);
        break;
    case PROTO_OP_NAMESPACE_SET:
        q.max_queues = r->max_queues;
        q.max_bytes = r->max_bytes_quota;
        q.produce_bytes_per_s = r->produce_bytes_per_s;
        idx_cmd_namespace_set(&b->open->w, n.ns, &q);
        break;
    case PROTO_OP_NAMESPACE_DELETE:
        idx_cmd_namespace_delete(&b->open->w, n.ns);
        break;
    default: /* PRODUCER_INIT */
        idx_cmd_producer_init(&b->open->w, n.user);
        break;
    }
    return add_finish(b, w);
}

/* QUEUE_CREATE (always with its settings tail: the request's, or the
 * built-in defaults when it had none) or QUEUE_UPDATE of queue into w. */
static void add_queue_settings(struct tern_wbuf *w,
                               const char *queue,
                               const struct proto_request *r)
{
    struct idx_queue_settings s = {
        .max_age_ms = r->settings.max_age_ms,
        .max_bytes = r->settings.max_bytes,
        .max_messages = r->settings.max_messages,
        .overflow = r->settings.overflow,
    };
    if (r->op == PROTO_OP_QUEUE_UPDATE) {
        idx_cmd_queue_update(w, queue, r->set_mask, &s);
        return;
    }
    /* The settings tail is always written: a QUEUE_CREATE without it means
     * "no limits" (a queue of the earlier release, index/apply.c), so a
     * client that sent no settings gets the built-in defaults here. */
    if (!r->has_settings) {
        idx_queue_settings_default(&s);
    }
    idx_cmd_queue_create_opts(w, queue, &s);
}

/* Whether queue and group are names idx_cmd_* takes (it would fail the
 * whole entry otherwise). */
static bool shared_names_ok(const char *queue, const char *group)
{
    return tern_qname_valid(queue, strnlen(queue, TERN_NAME_MAX + 1)) &&
           tern_name_valid(group, strnlen(group, TERN_NAME_MAX + 1));
}

/* A new wreq for owner's request (caller-owned until add_finish). */
static struct node_wreq *wreq_new(void *owner, uint64_t request_id, uint8_t op)
{
    struct node_wreq *w = tern_calloc(1, sizeof(*w));
    if (w != NULL) {
        tern_list_init(&w->link);
        w->owner = owner;
        w->request_id = request_id;
        w->op = op;
    }
    return w;
}

/* The backoff levels of a SETTLE retry (RocketMQ's delay levels from
 * 1 s): the delay of a message nacked after its count-th delivery. */
uint64_t node_retry_delay_ms(uint32_t count)
{
    static const uint32_t levels_s[] = {1,   5,   10,   30,   60,   120,
                                        180, 240, 300,  360,  420,  480,
                                        540, 600, 1200, 1800, 3600, 7200};
    size_t n = sizeof levels_s / sizeof levels_s[0];
    size_t i = count == 0 ? 0 : TERN_MIN((size_t)count - 1, n - 1);
    return (uint64_t)levels_s[i] * 1000u;
}

/* SHARED_CONFIG and SETTLE of a client (names already stored ones). */
static int add_shared(struct node_batcher *b,
                      void *owner,
                      uint64_t request_id,
                      const struct proto_request *r)
{
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    struct idx_shared_settings s;
    struct idx_settle_item *items = NULL;
    struct node_wreq *w;
    int rv;
    if (r->queue_len == 0 || r->queue_len > PROTO_MAX_NAME ||
        r->group_len == 0 || r->group_len > PROTO_MAX_NAME) {
        return TERN_EBADNAME;
    }
    name_copy(queue, r->queue, r->queue_len);
    name_copy(group, r->group, r->group_len);
    if (!shared_names_ok(queue, group)) {
        return TERN_EBADNAME;
    }
    memset(&s, 0, sizeof s);
    if (r->op == PROTO_OP_SHARED_CONFIG) {
        /* idx_cmd_shared_config's ranges, checked here (see above). */
        uint32_t m = r->set_mask;
        s.ack_timeout_ms = r->shared.ack_timeout_ms;
        s.max_deliveries = r->shared.max_deliveries;
        s.window = r->shared.window;
        if ((m & ~IDX_SHARED_SET_ALL) != 0 ||
            ((m & IDX_SHARED_SET_ACK_TIMEOUT) != 0 && s.ack_timeout_ms == 0) ||
            ((m & IDX_SHARED_SET_MAX_DELIVERIES) != 0 &&
             s.max_deliveries == 0) ||
            ((m & IDX_SHARED_SET_WINDOW) != 0 &&
             (s.window == 0 || s.window > IDX_SHARED_WINDOW_MAX)) ||
            r->shared.dlq_len > TERN_NAME_MAX) {
            return TERN_EINVAL;
        }
        name_copy(s.dlq, r->shared.dlq != NULL ? r->shared.dlq : "",
                  r->shared.dlq_len);
    } else {
        struct proto_settle_item it;
        size_t pos = 0;
        uint32_t i = 0;
        if (r->n_items == 0 || r->n_items > IDX_SHARED_LIST_MAX) {
            return TERN_EINVAL;
        }
        items = tern_calloc(r->n_items, sizeof(*items));
        if (items == NULL) {
            return -ENOMEM;
        }
        while (i < r->n_items && proto_next_settle(r, &pos, &it)) {
            items[i].offset = it.offset;
            items[i].count = it.count;
            items[i].action = it.action;
            items[i].delay_ms = it.delay_ms;
            if (it.action == PROTO_SETTLE_RETRY) {
                items[i].action = IDX_SETTLE_NACK;
                items[i].delay_ms = node_retry_delay_ms(it.count);
            }
            i++;
        }
        if (i != r->n_items) {
            tern_free(items);
            return TERN_EMALFORMED;
        }
    }
    w = wreq_new(owner, request_id, r->op);
    rv = w == NULL
             ? -ENOMEM
             : open_for(b, 64 + 2 * PROTO_MAX_NAME + (size_t)r->n_items * 32);
    if (rv != 0) {
        tern_free(items);
        tern_free(w);
        return rv;
    }
    if (r->op == PROTO_OP_SHARED_CONFIG) {
        idx_cmd_shared_config(&b->open->w, queue, group, r->set_mask, &s);
    } else {
        idx_cmd_settle(&b->open->w, queue, group, items, r->n_items);
        w->n_items = r->n_items;
    }
    tern_free(items);
    return add_finish(b, w);
}

int node_batcher_add_deliver(struct node_batcher *b,
                             void *owner,
                             uint64_t request_id,
                             const char *queue,
                             const char *group,
                             uint64_t consumer_id,
                             const struct idx_deliver_item *items,
                             uint32_t n)
{
    struct node_wreq *w;
    int rv;
    if (n == 0 || n > IDX_SHARED_LIST_MAX) {
        return TERN_EINVAL;
    }
    if (!shared_names_ok(queue, group)) {
        return TERN_EBADNAME;
    }
    w = wreq_new(owner, request_id, PROTO_OP_RECEIVE);
    if (w == NULL) {
        return -ENOMEM;
    }
    w->items = tern_calloc(n, sizeof(*items));
    rv = w->items == NULL
             ? -ENOMEM
             : open_for(b, 64 + 2 * TERN_NAME_MAX + (size_t)n * 12);
    if (rv != 0) {
        tern_free(w->items);
        tern_free(w);
        return rv;
    }
    memcpy(w->items, items, n * sizeof(*items));
    w->n_items = n;
    name_copy(w->queue, queue, (uint16_t)strlen(queue));
    name_copy(w->group, group, (uint16_t)strlen(group));
    idx_cmd_deliver(&b->open->w, queue, group, consumer_id, items, n);
    return add_finish(b, w);
}

int node_batcher_add_dead_letter(struct node_batcher *b,
                                 struct idx_env *e,
                                 const char *queue,
                                 const char *group,
                                 const struct idx_deliver_item *d,
                                 const char *reason)
{
    struct node_wreq *w;
    size_t before;
    int rv;
    if (!shared_names_ok(queue, group)) {
        return TERN_EBADNAME;
    }
    w = wreq_new(NULL, 0, 0);
    rv = w == NULL ? -ENOMEM : open_for(b, 4096);
    if (rv != 0) {
        tern_free(w);
        return rv;
    }
    before = b->open->w.len;
    rv = idx_dead_letter_plan(e, queue, group, d, reason, &b->open->w);
    if (rv != 0 && b->open->w.err == 0 && b->open->w.len == before) {
        /* Nothing was written (the message is gone, say). */
        tern_free(w);
        return rv;
    }
    return add_finish(b, w);
}

int node_batcher_add_settle(struct node_batcher *b,
                            const char *queue,
                            const char *group,
                            const struct idx_settle_item *items,
                            uint32_t n)
{
    struct node_wreq *w;
    int rv;
    if (n == 0 || n > IDX_SHARED_LIST_MAX) {
        return TERN_EINVAL;
    }
    if (!shared_names_ok(queue, group)) {
        return TERN_EBADNAME;
    }
    w = wreq_new(NULL, 0, 0);
    rv = w == NULL ? -ENOMEM
                   : open_for(b, 64 + 2 * TERN_NAME_MAX + (size_t)n * 32);
    if (rv != 0) {
        tern_free(w);
        return rv;
    }
    idx_cmd_settle(&b->open->w, queue, group, items, n);
    return add_finish(b, w);
}

int node_batcher_add(struct node_batcher *b,
                     void *owner,
                     uint64_t request_id,
                     const struct proto_request *r)
{
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    struct node_wreq *w;
    struct idx_pmsg *msgs = NULL;

    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_DELETE:
    case PROTO_OP_PRODUCE:
    case PROTO_OP_PRODUCE_DELAYED:
    case PROTO_OP_GROUP_COMMIT:
    case PROTO_OP_GROUP_FETCH:
    case PROTO_OP_QUEUE_UPDATE:
        break;
    case PROTO_OP_USER_SET:
    case PROTO_OP_USER_DELETE:
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
    case PROTO_OP_NAMESPACE_SET:
    case PROTO_OP_NAMESPACE_DELETE:
    case PROTO_OP_PRODUCER_INIT:
        return add_security(b, owner, request_id, r);
    case PROTO_OP_SHARED_CONFIG:
    case PROTO_OP_SETTLE:
        return add_shared(b, owner, request_id, r);
    default:
        return TERN_EINVAL;
    }
    /* idx_cmd_* errors are sticky in the entry buffer and would fail every
     * request sharing the entry: reject here what idx_cmd_* would. */
    if (r->queue_len == 0 || r->queue_len > PROTO_MAX_NAME ||
        r->group_len > PROTO_MAX_NAME ||
        ((r->op == PROTO_OP_GROUP_COMMIT || r->op == PROTO_OP_GROUP_FETCH) &&
         r->group_len == 0)) {
        return TERN_EBADNAME;
    }
    if ((r->op == PROTO_OP_PRODUCE || r->op == PROTO_OP_PRODUCE_DELAYED) &&
        (r->n_msgs == 0 || (r->producer_id != 0 && r->seq == 0))) {
        return TERN_EINVAL;
    }
    w = tern_calloc(1, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    if ((r->op == PROTO_OP_PRODUCE || r->op == PROTO_OP_PRODUCE_DELAYED) &&
        r->n_msgs > 0) {
        size_t pos = 0;
        struct proto_msg m;
        uint32_t i = 0;
        msgs = tern_calloc(r->n_msgs, sizeof(*msgs));
        if (msgs == NULL) {
            tern_free(w);
            return -ENOMEM;
        }
        while (i < r->n_msgs && proto_next_msg(r, &pos, &m)) {
            msgs[i].data = m.data;
            msgs[i].len = m.len;
            w->msg_bytes += m.len;
            i++;
        }
        w->added_ns = uv_hrtime();
        /* Properties blocks (checked by the server before this). */
        pos = 0;
        for (uint32_t k = 0; r->props_len > 0 && k < i; k++) {
            if (!proto_next_props(r, &pos, &m)) {
                i = 0;
                break;
            }
            msgs[k].props = m.data;
            msgs[k].props_len = m.len;
        }
        if (i != r->n_msgs) {
            tern_free(msgs);
            tern_free(w);
            return TERN_EMALFORMED;
        }
    }
    if (b->open != NULL && b->open->n_cmds > b->open->n_lead &&
        (b->open->n_cmds >= b->max_cmds ||
         b->open->w.len + request_size(r) > b->max_entry_bytes)) {
        seal_open(b);
    }
    if (b->open == NULL) {
        b->open = batch_new(b);
        if (b->open == NULL) {
            tern_free(msgs);
            tern_free(w);
            return -ENOMEM;
        }
    }
    tern_list_init(&w->link);
    w->owner = owner;
    w->request_id = request_id;
    w->op = r->op;
    name_copy(queue, r->queue, r->queue_len);
    name_copy(group, r->group != NULL ? r->group : "", r->group_len);
    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_UPDATE:
        add_queue_settings(&b->open->w, queue, r);
        break;
    case PROTO_OP_QUEUE_DELETE:
        idx_cmd_queue_delete(&b->open->w, queue);
        break;
    case PROTO_OP_PRODUCE:
        idx_cmd_produce_props(&b->open->w, queue, r->producer_id, r->seq, msgs,
                              r->n_msgs);
        break;
    case PROTO_OP_PRODUCE_DELAYED: {
        /* The leader's clock is the entry's timestamp: apply compares due
         * times with it. A time asked for that is past is "now". */
        uint64_t when = r->time_ms & ~PROTO_DELAY_AT;
        uint64_t t = b->open->ts;
        if ((r->time_ms & PROTO_DELAY_AT) != 0) {
            w->due_ms = when > t ? when : t;
        } else {
            w->due_ms = when > UINT64_MAX - t ? UINT64_MAX : t + when;
        }
        idx_cmd_produce_delayed(&b->open->w, queue, w->due_ms, r->producer_id,
                                r->seq, msgs, r->n_msgs);
        break;
    }
    case PROTO_OP_GROUP_FETCH:
        /* A read: nothing changes, the request is answered (served from
         * the index) once the barrier is applied and flushed. */
        idx_cmd_read_barrier(&b->open->w);
        memcpy(w->queue, queue, sizeof(w->queue));
        memcpy(w->group, group, sizeof(w->group));
        w->max_msgs = r->max_msgs;
        w->max_bytes = r->max_bytes;
        w->wait_ms = r->wait_ms;
        w->filter.flags = r->flags;
        w->filter.n_tags = r->n_tags;
        w->filter.len = (uint16_t)TERN_MIN(r->tags_len, sizeof w->filter.raw);
        if (w->filter.len > 0) {
            memcpy(w->filter.raw, r->tags, w->filter.len);
        }
        break;
    default:
        /* A connection with a consumer id commits as that consumer
         * (single active consumer, docs/WORKQUEUES.md). */
        if (r->consumer_id != 0) {
            idx_cmd_group_commit_as(&b->open->w, queue, group, r->consumer_id,
                                    r->offset);
        } else {
            idx_cmd_group_commit(&b->open->w, queue, group, r->offset);
        }
        break;
    }
    tern_free(msgs);
    return add_finish(b, w);
}

int node_batcher_add_claim(struct node_batcher *b,
                           void *owner,
                           uint64_t request_id,
                           const char *queue,
                           const char *group,
                           uint64_t consumer_id,
                           uint32_t action,
                           uint32_t lease_ms)
{
    struct node_wreq *w;
    int rv;
    if (consumer_id == 0 ||
        (action == IDX_CLAIM_ACQUIRE
             ? lease_ms == 0
             : action != IDX_CLAIM_RELEASE || lease_ms != 0)) {
        return TERN_EINVAL;
    }
    if (!shared_names_ok(queue, group)) {
        return TERN_EBADNAME;
    }
    w = wreq_new(owner, request_id, PROTO_OP_CLAIM);
    rv = w == NULL ? -ENOMEM : open_for(b, 64 + 2 * TERN_NAME_MAX);
    if (rv != 0) {
        tern_free(w);
        return rv;
    }
    name_copy(w->queue, queue, (uint16_t)strlen(queue));
    name_copy(w->group, group, (uint16_t)strlen(group));
    idx_cmd_claim(&b->open->w, queue, group, consumer_id, action, lease_ms);
    return add_finish(b, w);
}

int node_batcher_add_trim(struct node_batcher *b,
                          const char *queue,
                          const struct idx_trim_plan *plan)
{
    struct node_wreq *w;
    int rv;
    if (plan->to <= plan->from) {
        return TERN_EINVAL;
    }
    if (!tern_qname_valid(queue, strnlen(queue, TERN_NAME_MAX + 1))) {
        return TERN_EBADNAME;
    }
    w = tern_calloc(1, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    rv = open_for(b, 48 + TERN_NAME_MAX);
    if (rv != 0) {
        tern_free(w);
        return rv;
    }
    tern_list_init(&w->link);
    idx_cmd_trim(&b->open->w, queue, plan->queue_id, plan->from, plan->to,
                 plan->bytes);
    return add_finish(b, w);
}

int node_batcher_add_timer_fire(struct node_batcher *b,
                                node_timer_plan_cb plan,
                                void *arg,
                                void *owner,
                                uint32_t *keys)
{
    struct node_batch *batch;
    struct node_wreq *w;
    int rv;
    *keys = 0;
    /* A fresh entry of its own: a failed plan cannot spoil requests that
     * share it, and an empty plan is dropped without a proposal. */
    if (b->open != NULL && b->open->n_cmds > b->open->n_lead) {
        seal_open(b);
    }
    w = tern_calloc(1, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    if (b->open == NULL) {
        b->open = batch_new(b);
        if (b->open == NULL) {
            tern_free(w);
            return -ENOMEM;
        }
    }
    batch = b->open;
    rv = plan(arg, &batch->w, batch->ts, keys);
    if (rv == 0 && batch->w.err != 0) {
        rv = batch->w.err;
    }
    if (rv != 0 || *keys == 0) {
        b->open = NULL;
        batch_free(batch);
        tern_free(w);
        *keys = 0;
        return rv;
    }
    tern_list_init(&w->link);
    w->owner = owner;
    w->op = NODE_WREQ_TIMER_FIRE;
    return add_finish(b, w);
}

bool node_batcher_congested(const struct node_batcher *b)
{
    return b->n_queued >= b->max_queued;
}

bool node_batcher_idle(const struct node_batcher *b)
{
    return b->open == NULL && b->n_queued == 0 && b->n_inflight == 0 &&
           b->n_done == 0;
}

void node_batcher_propose(struct node_batcher *b)
{
    seal_open(b);
    while (b->n_queued > 0 && b->n_inflight < b->max_inflight &&
           (b->n_inflight == 0 || b->inflight_bytes < b->max_inflight_bytes)) {
        struct node_batch *batch =
            TERN_CONTAINER(b->queued.next, struct node_batch, link);
        uint64_t index = 0;
        int rv;

        tern_list_remove(&batch->link);
        b->n_queued--;
        batch->proposed_ns = uv_hrtime();
        rv = b->ops.propose(b->arg, batch, batch->w.base, batch->w.len, &index);
        if (rv != 0) {
            batch_answer(batch, rv);
            continue;
        }
        /* The bytes now belong to repl. */
        tern_wbuf_init(&batch->w);
        batch->index = index;
        tern_list_push(&b->inflight, &batch->link);
        b->n_inflight++;
        b->inflight_bytes += batch->len;
    }
}

void node_batcher_on_apply(struct node_batcher *b,
                           uint64_t index,
                           const void *entry,
                           size_t len,
                           const struct idx_result *results,
                           unsigned n)
{
    struct tern_list *l;
    len = idx_cmd_entry_len(entry, len);
    for (l = b->inflight.next; l != &b->inflight; l = l->next) {
        struct node_batch *batch = TERN_CONTAINER(l, struct node_batch, link);
        struct tern_list *wl;
        unsigned i = 0;
        uint64_t now;

        if (batch->index != index) {
            continue;
        }
        /* The 24-byte entry header holds the leader timestamp, the length
         * and a checksum of the whole entry: equal headers mean equal
         * entries, without hashing megabytes again. */
        if (batch->applied || batch->len != len ||
            memcmp(entry, batch->head, TERN_MIN(len, sizeof(batch->head))) !=
                0) {
            return; /* another leader's entry at our index */
        }
        i = batch->n_lead; /* the TERM's result answers nobody */
        now = uv_hrtime();
        for (wl = batch->wreqs.next; wl != &batch->wreqs; wl = wl->next) {
            struct node_wreq *w = TERN_CONTAINER(wl, struct node_wreq, link);
            w->proposed_ns = batch->proposed_ns;
            w->applied_ns = now;
            if (i < n) {
                w->result = results[i];
                w->status = results[i].status;
            } else {
                w->status = TERN_EINTERNAL;
            }
            i++;
        }
        batch->applied = true;
        return;
    }
}

void node_batcher_proposed(struct node_batch *batch, int status, uint64_t index)
{
    struct node_batcher *b = batch->batcher;
    (void)index;
    tern_list_remove(&batch->link);
    b->n_inflight--;
    b->inflight_bytes -= batch->len;
    if (status != 0) {
        batch_answer(batch, status);
        return;
    }
    if (!batch->applied) {
        struct tern_list *wl;
        for (wl = batch->wreqs.next; wl != &batch->wreqs; wl = wl->next) {
            TERN_CONTAINER(wl, struct node_wreq, link)->status = TERN_EINTERNAL;
        }
    }
    tern_list_push(&b->done, &batch->link);
    b->n_done++;
}

void node_batcher_answer_produces(struct node_batcher *b)
{
    for (struct tern_list *l = b->done.next; l != &b->done; l = l->next) {
        struct node_batch *batch = TERN_CONTAINER(l, struct node_batch, link);
        struct tern_list *wl = batch->wreqs.next;
        while (wl != &batch->wreqs) {
            struct node_wreq *w = TERN_CONTAINER(wl, struct node_wreq, link);
            wl = wl->next;
            if (w->op == PROTO_OP_PRODUCE ||
                w->op == PROTO_OP_PRODUCE_DELAYED) {
                wreq_answer(b, w);
            }
        }
    }
}

void node_batcher_flushed(struct node_batcher *b)
{
    while (!tern_list_empty(&b->done)) {
        struct node_batch *batch =
            TERN_CONTAINER(b->done.next, struct node_batch, link);
        tern_list_remove(&batch->link);
        b->n_done--;
        batch_answer(batch, 0);
    }
}

void node_batcher_fail_pending(struct node_batcher *b, int status)
{
    if (b->open != NULL) {
        struct node_batch *batch = b->open;
        b->open = NULL;
        batch_answer(batch, status);
    }
    while (!tern_list_empty(&b->queued)) {
        struct node_batch *batch =
            TERN_CONTAINER(b->queued.next, struct node_batch, link);
        tern_list_remove(&batch->link);
        b->n_queued--;
        batch_answer(batch, status);
    }
}
