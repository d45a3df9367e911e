/*
 * libtern's idempotent producer. The client's producer id is the base of
 * a block the leader issued (PRODUCER_INIT, asked by api.c before the
 * first produce: id n << 32, the client may use n << 32 | k for every
 * k < 2^32), or a random id with a server that predates issued ids; each
 * queue it produces to gets its own state (struct tern__pq, found by a
 * hash of the queue name, c->pq_table): the
 * producer id its batches carry and the next sequence number, starting at
 * 1. A retried batch keeps its (producer id, sequence), so the server
 * appends it once and answers a retry with the original offsets.
 *
 * Produce ordering (invariant): batches of one queue carry consecutive
 * sequence numbers in request-list order, and a batch is only sent when
 * every earlier batch of its queue is on the wire or done (engine.c,
 * pump). When one batch must be retried, every later batch of the same
 * queue that is on the wire is taken back too (tern__pq_rewind), so the
 * resend is again in sequence order; the server deduplicates whatever it
 * had already appended (same producer id and sequence -> original
 * offsets). A TERN_ESEQUENCE answer (the server saw a gap: an earlier
 * batch has not reached this leader yet) rewinds the queue from its oldest
 * outstanding batch. If a batch times out, its outcome is unknown and a
 * gap may stay forever. Later batches of the queue then get TERN_ESEQUENCE
 * at their oldest, which proves none of them was appended: they are
 * renumbered from 1 under a fresh producer id for that queue
 * (tern__pq_renumber: the next id of the block, base | k for k = 1, 2,
 * ..., wrapping to 1 after 2^32 - 1; a new random id without a block) and
 * resent. The same recovers from a batch that failed for good (TERN_ENOQUEUE,
 * ...).
 *
 * Unknown outcome: the last batch of a queue that ended in TERN_ETIMEDOUT
 * is remembered (producer id, sequence, message count and checksum) so
 * tern_produce_resend can send the same batch again under the same pair;
 * the resend's answer resolves it (rules in <tern/tern.h>).
 *
 * Bound: a client keeps at most c->pq_max (TERN__PQ_MAX) states. Past
 * it, making a state drops the least recently used one that no request
 * holds (refs: a request's pq or resend_of, and a call that runs the
 * engine while it keeps a state pins it). A dropped queue's next produce
 * starts a fresh state: the next producer id of the block (as a
 * renumber does) and sequence 1, which the server takes like a new
 * producer; what is lost is only the queue's unknown outcome, so a
 * tern_produce_resend must come before the client has produced to
 * TERN__PQ_MAX other queues. If the 64 least recently used states are all
 * held (more requests outstanding than that), the state is made anyway:
 * those are bounded by the requests themselves. Each state made after a
 * drop is a new (producer id, queue) row on the servers (kept until the
 * queue is deleted).
 *
 * This file decides numbering and order; engine.c decides when to apply
 * it (on which answers) and sends the frames.
 */
#include <errno.h>
#include <stdbool.h>
#include <sys/random.h>

#include "client_int.h"

uint64_t tern__producer_id_new(void)
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

uint64_t tern__producer_id_next(struct tern_client *c)
{
    if (c->pid_state != TERN__PID_ISSUED || c->pid_next_k == UINT32_MAX) {
        /* Past the last k of the block a k again could meet a (producer
         * id, queue) the server remembers, which would take a new batch
         * for a duplicate: a random id instead (a server that checks ids
         * against the blocks it issued refuses it, a clear error). */
        return tern__producer_id_new();
    }
    c->pid_next_k++;
    return c->producer_id | c->pid_next_k;
}

/* FNV-1a of a queue name: the bucket of its state in c->pq_table. */
static uint32_t pq_hash(const char *queue)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)queue; *p != 0; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h;
}

/* Rebuild c->pq_table with nb buckets (a power of two). On ENOMEM the old
 * table stays (lookups stay correct, only longer). */
static void pq_table_resize(struct tern_client *c, size_t nb)
{
    struct tern__pq **t = tern_calloc(nb, sizeof *t);
    if (t == NULL) {
        return;
    }
    for (struct tern_list *l = c->pq_lru.next; l != &c->pq_lru; l = l->next) {
        struct tern__pq *pq = TERN_CONTAINER(l, struct tern__pq, lru);
        size_t b = pq->hash & (nb - 1);
        pq->hnext = t[b];
        t[b] = pq;
    }
    tern_free(c->pq_table);
    c->pq_table = t;
    c->pq_buckets = nb;
}

/* Drop the least recently used state no request holds (see "Bound");
 * looks at most 64 from the old end. */
static void pq_drop_one(struct tern_client *c)
{
    struct tern_list *l = c->pq_lru.next;
    for (int k = 0; l != &c->pq_lru && k < 64; k++, l = l->next) {
        struct tern__pq *pq = TERN_CONTAINER(l, struct tern__pq, lru);
        if (pq->refs == 0) {
            struct tern__pq **pp = &c->pq_table[pq->hash & (c->pq_buckets - 1)];
            while (*pp != pq) {
                pp = &(*pp)->hnext;
            }
            *pp = pq->hnext;
            tern_list_remove(&pq->lru);
            tern_free(pq->queue);
            tern_free(pq);
            c->n_pqs--;
            c->pq_dropped++;
            return;
        }
    }
}

uint64_t tern__pq_first_id(struct tern_client *c)
{
    /* A queue seen before may have left its state at the bound: then a
     * fresh producer id, never the old one at sequence 1 again (the
     * server would take the batch for a duplicate of the old first). */
    if (c->producer_id == 0) {
        return 0; /* not known yet: the produce asks for it first */
    }
    return c->pq_dropped > 0 ? tern__producer_id_next(c) : c->producer_id;
}

void tern__pq_hold(struct tern__pq *pq)
{
    pq->refs++;
}

void tern__pq_release(struct tern__pq *pq)
{
    if (pq->refs > 0) {
        pq->refs--;
    }
}

struct tern__pq *tern__pq_find(struct tern_client *c, const char *queue)
{
    uint32_t h = pq_hash(queue);
    if (c->pq_table == NULL) {
        return NULL;
    }
    for (struct tern__pq *pq = c->pq_table[h & (c->pq_buckets - 1)]; pq != NULL;
         pq = pq->hnext) {
        if (pq->hash == h && strcmp(pq->queue, queue) == 0) {
            return pq;
        }
    }
    return NULL;
}

/* A client that produces to many queues keeps one state per queue: the
 * lookup is a hash (constant time), not a walk of every state. */
struct tern__pq *tern__pq_get(struct tern_client *c, const char *queue)
{
    struct tern__pq *pq = tern__pq_find(c, queue);
    uint32_t h = pq_hash(queue);
    if (pq != NULL) {
        tern_list_remove(&pq->lru); /* now the most recently used */
        tern_list_push(&c->pq_lru, &pq->lru);
        return pq;
    }
    if (c->pq_table == NULL) {
        pq_table_resize(c, 64);
        if (c->pq_table == NULL) {
            return NULL;
        }
    }
    if (c->n_pqs >= c->pq_max) {
        pq_drop_one(c);
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
    pq->hash = h;
    pq->producer_id = tern__pq_first_id(c);
    pq->next_seq = 1;
    tern_list_push(&c->pq_lru, &pq->lru);
    pq->hnext = c->pq_table[h & (c->pq_buckets - 1)];
    c->pq_table[h & (c->pq_buckets - 1)] = pq;
    c->n_pqs++;
    if (c->n_pqs > c->pq_buckets) {
        pq_table_resize(c, c->pq_buckets * 2);
    }
    return pq;
}

void tern__pq_free_all(struct tern_client *c)
{
    while (!tern_list_empty(&c->pq_lru)) {
        struct tern__pq *pq =
            TERN_CONTAINER(c->pq_lru.next, struct tern__pq, lru);
        tern_list_remove(&pq->lru);
        tern_free(pq->queue);
        tern_free(pq);
    }
    tern_free(c->pq_table);
    c->pq_table = NULL;
    c->pq_buckets = 0;
    c->n_pqs = 0;
}

/* Checksum of a batch's messages (lengths and bytes), to tell a resend of
 * the same batch from another one. */
static void sum_msg(struct tern_checksum_state *st, const void *data, size_t n)
{
    uint8_t len[8];
    tern_put_u64(len, (uint64_t)n);
    tern_checksum32_update(st, len, sizeof len);
    if (n > 0) {
        tern_checksum32_update(st, data, n);
    }
}

uint32_t tern__batch_checksum(const struct tern_msg *msgs, size_t n)
{
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    for (size_t k = 0; k < n; k++) {
        sum_msg(&st, msgs[k].data, msgs[k].len);
    }
    return tern_checksum32_end(&st);
}

/* tern__batch_checksum of the messages r's PRODUCE frame carries: a
 * merged batch (api.c produce_merge) keeps no running sum. */
static uint32_t frame_batch_checksum(const struct tern__req *r)
{
    struct tern_checksum_state st;
    struct proto_request q;
    struct proto_msg m;
    size_t pos = 0;
    if (r->frame.len < PROTO_HEADER_SIZE ||
        proto_decode_request(PROTO_OP_PRODUCE,
                             r->frame.base + PROTO_HEADER_SIZE,
                             r->frame.len - PROTO_HEADER_SIZE, &q) != 0) {
        return r->msg_sum; /* never: the client built the frame */
    }
    tern_checksum32_begin(&st);
    while (proto_next_msg(&q, &pos, &m)) {
        sum_msg(&st, m.data, m.len);
    }
    return tern_checksum32_end(&st);
}

/* Check a produce call's arguments and find (or make) the queue's producer
 * state; a resend only finds it (NULL when there is none). */
static int produce_check(struct tern_client *c,
                         const char *queue,
                         const struct tern_msg *msgs,
                         size_t n,
                         bool make,
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
    if (!make) {
        *pq = tern__pq_find(c, queue);
        return 0;
    }
    *pq = tern__pq_get(c, queue);
    return *pq != NULL ? 0 : -ENOMEM;
}

int tern__produce_check(struct tern_client *c,
                        const char *queue,
                        const struct tern_msg *msgs,
                        size_t n,
                        struct tern__pq **pq)
{
    return produce_check(c, queue, msgs, n, true, pq);
}

int tern__resend_check(struct tern_client *c,
                       const char *queue,
                       const struct tern_msg *msgs,
                       size_t n,
                       struct tern__pq **pq)
{
    int rv = produce_check(c, queue, msgs, n, false, pq);
    if (rv == 0) {
        rv = tern__produce_resend_check(c, *pq, queue, msgs, n);
    }
    return rv;
}

int tern__produce_resend_check(struct tern_client *c,
                               const struct tern__pq *pq,
                               const char *queue,
                               const struct tern_msg *msgs,
                               size_t n)
{
    if (pq == NULL || !pq->unknown_valid) {
        tern_errmsg_printf(
            c->errmsg, "resend to %s: no batch with an unknown outcome", queue);
        return TERN_EINVAL;
    }
    if (pq->unknown_n != n ||
        pq->unknown_sum != tern__batch_checksum(msgs, n)) {
        tern_errmsg_printf(c->errmsg,
                           "resend to %s: not the batch that timed out "
                           "(%zu messages, checksum %08x)",
                           queue, pq->unknown_n, pq->unknown_sum);
        return TERN_EINVAL;
    }
    return 0;
}

/* Re-queue every on-the-wire produce of pq with seq >= from_seq. */
void tern__pq_rewind(struct tern_client *c,
                     struct tern__pq *pq,
                     uint64_t from_seq,
                     int64_t not_before)
{
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq && r->seq >= from_seq && r->state == TERN__REQ_SENT) {
            tern__req_detach(r);
            r->not_before = TERN_MAX(r->not_before, not_before);
        }
    }
}

struct tern__req *tern__pq_oldest(struct tern_client *c,
                                  const struct tern__pq *pq)
{
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq) {
            return r;
        }
    }
    return NULL;
}

/* The oldest outstanding batch of pq got TERN_ESEQUENCE: the server has a
 * gap before it (an earlier batch failed or timed out without being
 * appended), so none of the outstanding batches was appended either (the
 * server appends seq only after seq - 1). Renumber them all from 1 under a
 * fresh producer id for this queue (tern__producer_id_next) and resend in
 * order. */
void tern__pq_renumber(struct tern_client *c, struct tern__pq *pq)
{
    pq->producer_id = tern__producer_id_next(c);
    pq->next_seq = 1;
    for (struct tern__req *r = c->head; r != NULL; r = r->next) {
        if (r->pq == pq) {
            tern__req_detach(r);
            r->seq = pq->next_seq++;
            r->pid = pq->producer_id;
            (void)proto_frame_set_producer(r->frame.base, r->frame.len,
                                           pq->producer_id, r->seq);
        }
    }
}

/* Remember or forget the batch with an unknown outcome (resend rules in
 * <tern/tern.h>, tern_produce_resend). */
void tern__produce_note_outcome(const struct tern__req *r, int status)
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
        pq->unknown_sum = r->n_parts > 0 ? frame_batch_checksum(r) : r->msg_sum;
    } else if (r->resend_of != NULL && pq->unknown_valid &&
               pq->unknown_pid == r->pid && pq->unknown_seq == r->seq) {
        pq->unknown_valid = 0; /* resolved: appended once, or never */
    }
}
