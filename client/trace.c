/*
 * libtern's message trace (<tern/tern.h>, "Message trace"): one
 * MESSAGE_TRACE request (proto.h op 26), a read served by any node like
 * a message get, and the result object built from its answer.
 *
 * The object owns a copy of the answer body (the key and tag point into
 * it) and an array of the groups with NUL-terminated copies of their
 * names; every accessor borrows from it until tern_message_trace_free.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client_int.h"

struct tern_message_trace
{
    uint8_t *body; /* the answer, owned */
    struct proto_trace t;
    struct tern_trace_group *groups; /* n_groups, names in names */
    char *names;
    struct tern_trace_delivery *deliveries; /* n_deliveries, names in
                                               dnames */
    char *dnames;
};

void tern_message_trace_free(struct tern_message_trace *t)
{
    if (t == NULL) {
        return;
    }
    tern_free(t->groups);
    tern_free(t->names);
    tern_free(t->deliveries);
    tern_free(t->dnames);
    tern_free(t->body);
    tern_free(t);
}

/* The delivery records of t's decoded answer, with NUL-terminated group
 * names. 0 or -ENOMEM (nothing allocated then). */
static int deliveries_new(struct tern_message_trace *t)
{
    struct proto_delivery d;
    size_t pos = 0, len = 1, k = 0;
    while (proto_next_delivery(&t->t, &pos, &d)) {
        len += (size_t)d.group_len + 1;
    }
    t->deliveries = tern_calloc(t->t.n_deliveries != 0 ? t->t.n_deliveries : 1,
                                sizeof *t->deliveries);
    t->dnames = tern_malloc(len);
    if (t->deliveries == NULL || t->dnames == NULL) {
        tern_free(t->deliveries);
        tern_free(t->dnames);
        t->deliveries = NULL;
        t->dnames = NULL;
        return -ENOMEM;
    }
    char *p = t->dnames;
    for (pos = 0; k < t->t.n_deliveries && proto_next_delivery(&t->t, &pos, &d);
         k++) {
        memcpy(p, d.group, d.group_len);
        p[d.group_len] = '\0';
        t->deliveries[k] = (struct tern_trace_delivery){
            p, d.state, d.count, d.consumer_id, d.deadline_ms};
        p += d.group_len + 1;
    }
    return 0;
}

/* The object of an answer body (ownership transferred on 0).
 * TERN_EMALFORMED, -ENOMEM. */
static int trace_new(uint8_t *body, size_t len, struct tern_message_trace **out)
{
    struct tern_message_trace *t = tern_calloc(1, sizeof *t);
    struct proto_trace_group g;
    size_t pos = 0, names_len = 1, k = 0;
    if (t == NULL) {
        return -ENOMEM;
    }
    if (proto_decode_message_trace_resp(body, len, &t->t) != 0) {
        tern_free(t);
        return TERN_EMALFORMED;
    }
    while (proto_next_trace_group(&t->t, &pos, &g)) {
        names_len += (size_t)g.name_len + 1;
    }
    t->groups =
        tern_calloc(t->t.n_groups != 0 ? t->t.n_groups : 1, sizeof *t->groups);
    t->names = tern_malloc(names_len);
    if (t->groups == NULL || t->names == NULL) {
        tern_free(t->groups);
        tern_free(t->names);
        tern_free(t);
        return -ENOMEM;
    }
    char *p = t->names;
    for (pos = 0; k < t->t.n_groups && proto_next_trace_group(&t->t, &pos, &g);
         k++) {
        memcpy(p, g.name, g.name_len);
        p[g.name_len] = '\0';
        t->groups[k].name = p;
        t->groups[k].committed_offset = g.next_offset;
        t->groups[k].commit_ms = g.commit_ms;
        t->groups[k].commit_index = g.commit_index;
        p += g.name_len + 1;
    }
    if (deliveries_new(t) != 0) {
        tern_free(t->groups);
        tern_free(t->names);
        tern_free(t);
        return -ENOMEM;
    }
    t->body = body;
    *out = t;
    return 0;
}

int tern_message_trace(struct tern_client *c,
                       const char *queue,
                       uint64_t offset,
                       struct tern_message_trace **out)
{
    return tern_message_trace_ex(c, queue, offset, 0, out);
}

/* tern__sync_call's done: the trace takes the answer's body. */
static int trace_done(struct tern__req *r, void *out)
{
    int rv = trace_new(r->body, r->body_len, out);
    if (rv == 0) {
        r->body = NULL; /* now the trace's */
    }
    return rv;
}

int tern_message_trace_ex(struct tern_client *c,
                          const char *queue,
                          uint64_t offset,
                          unsigned flags,
                          struct tern_message_trace **out)
{
    struct tern__req *r;
    char what[TERN_NAME_MAX + 16];
    *out = NULL;
    /* A read: where read_from says, as fetch. */
    int rv = tern__sync_req_new(c, PROTO_OP_MESSAGE_TRACE, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    (void)snprintf(what, sizeof what, "message trace %.200s",
                   queue != NULL ? queue : "(null)");
    rv = (flags & ~TERN_TRACE_DELIVERIES) != 0
             ? TERN_EINVAL
             : proto_encode_message_trace_flags(
                   &r->frame, 0, queue, offset,
                   (flags & TERN_TRACE_DELIVERIES) != 0 ? PROTO_TRACE_DELIVERIES
                                                        : 0);
    return tern__sync_call(c, r, rv, what, trace_done, out);
}

void tern_message_trace_info(const struct tern_message_trace *t,
                             struct tern_trace_info *out)
{
    memset(out, 0, sizeof *out);
    out->offset = t->t.offset;
    (void)snprintf(out->id, sizeof out->id, "%016llx%016llx",
                   (unsigned long long)t->t.queue_id,
                   (unsigned long long)t->t.offset);
    out->append_ms = t->t.append_ms;
    out->producer_id = t->t.producer_id;
    out->seq = t->t.seq;
    out->batch_pos = t->t.batch_pos;
    out->batch_count = t->t.batch_count;
    out->len = t->t.len;
    out->raft_index = t->t.raft_index;
    out->term = t->t.term;
    out->key = t->t.key;
    out->key_len = t->t.key_len;
    out->tag = t->t.tag;
    out->tag_len = t->t.tag_len;
    out->n_groups = t->t.n_groups;
    out->more_groups = t->t.more;
}

int tern_message_trace_group(const struct tern_message_trace *t,
                             size_t i,
                             struct tern_trace_group *out)
{
    if (i >= t->t.n_groups) {
        return TERN_EINVAL;
    }
    *out = t->groups[i];
    return 0;
}

const char *tern_delivery_state_name(int state)
{
    switch (state) {
    case TERN_DELIVERY_NEW:
        return "new";
    case TERN_DELIVERY_SETTLED:
        return "settled";
    case TERN_DELIVERY_LEASED:
        return "leased";
    case TERN_DELIVERY_READY:
        return "ready";
    default:
        return "unknown";
    }
}

size_t tern_message_trace_delivery_count(const struct tern_message_trace *t,
                                         int *more)
{
    if (more != NULL) {
        *more = t->t.deliveries_more;
    }
    return t->t.n_deliveries;
}

int tern_message_trace_delivery(const struct tern_message_trace *t,
                                size_t i,
                                struct tern_trace_delivery *out)
{
    if (i >= t->t.n_deliveries) {
        return TERN_EINVAL;
    }
    *out = t->deliveries[i];
    return 0;
}

int tern_message_trace_has_deliveries(const struct tern_message_trace *t)
{
    return t->t.has_deliveries;
}
