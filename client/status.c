/*
 * libtern's group status (<tern/tern.h>, "Group status"): one
 * GROUP_STATUS request (proto.h op 32), a read served by any node like a
 * message trace, and the result object built from its answer.
 *
 * The object owns the answer body and an array of the decoded records
 * with NUL-terminated copies of their group and DLQ names; the consumers
 * are read from the body on demand. Every accessor borrows from it until
 * tern_group_status_free.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client_int.h"

struct tern__gstatus
{
    struct tern_group_status pub;
    struct proto_group_status raw; /* consumers_raw borrows the body */
};

struct tern_group_status_list
{
    uint8_t *body; /* the answer, owned */
    struct proto_group_status_resp r;
    struct tern__gstatus *groups; /* r.n of them */
    char *names;                  /* group and DLQ names, owned */
};

void tern_group_status_free(struct tern_group_status_list *l)
{
    if (l == NULL) {
        return;
    }
    tern_free(l->groups);
    tern_free(l->names);
    tern_free(l->body);
    tern_free(l);
}

static char *put_name(char *p, const char *s, size_t len)
{
    if (len > 0) {
        memcpy(p, s, len);
    }
    p[len] = '\0';
    return p;
}

/* The object of an answer body (ownership transferred on 0).
 * TERN_EMALFORMED, -ENOMEM. */
static int list_new(uint8_t *body,
                    size_t len,
                    struct tern_group_status_list **out)
{
    struct tern_group_status_list *l = tern_calloc(1, sizeof *l);
    struct proto_group_status g;
    size_t pos = 0, names_len = 1, k = 0;
    if (l == NULL) {
        return -ENOMEM;
    }
    if (proto_decode_group_status_resp(body, len, &l->r) != 0) {
        tern_free(l);
        return TERN_EMALFORMED;
    }
    while (proto_next_group_status(&l->r, &pos, &g)) {
        names_len += (size_t)g.group_len + g.dlq_len + 2;
    }
    l->groups = tern_calloc(l->r.n != 0 ? l->r.n : 1, sizeof *l->groups);
    l->names = tern_malloc(names_len);
    if (l->groups == NULL || l->names == NULL) {
        tern_group_status_free(l);
        return -ENOMEM;
    }
    char *p = l->names;
    for (pos = 0; k < l->r.n && proto_next_group_status(&l->r, &pos, &g); k++) {
        struct tern_group_status *s = &l->groups[k].pub;
        l->groups[k].raw = g;
        s->name = put_name(p, g.group, g.group_len);
        p += g.group_len + 1;
        s->dlq = put_name(p, g.dlq, g.dlq_len);
        p += g.dlq_len + 1;
        s->shared = g.shared;
        s->start = g.start;
        s->end = g.end;
        s->committed = g.committed;
        s->next = g.next;
        s->lag = g.lag;
        s->commit_ms = g.commit_ms;
        s->ack_timeout_ms = g.ack_timeout_ms;
        s->max_deliveries = g.max_deliveries;
        s->window = g.window;
        s->dlq_depth = g.dlq_depth;
        s->in_flight = g.in_flight;
        s->ready = g.ready;
        s->oldest_deadline_ms = g.oldest_deadline_ms;
        s->partial = g.partial;
        s->others_held = g.others_held;
        s->n_consumers = g.n_consumers;
        s->claim_holder = g.claim_holder;
        s->claim_until_ms = g.claim_until_ms;
    }
    l->body = body;
    *out = l;
    return 0;
}

/* tern__sync_call's done: the list takes the answer's body. */
static int status_done(struct tern__req *r, void *out)
{
    int rv = list_new(r->body, r->body_len, out);
    if (rv == 0) {
        r->body = NULL; /* now the list's */
    }
    return rv;
}

int tern_group_status(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      const char *after,
                      uint32_t max,
                      struct tern_group_status_list **out)
{
    struct tern__req *r;
    char what[TERN_NAME_MAX + 16];
    *out = NULL;
    /* A read: where read_from says, as fetch. */
    int rv = tern__sync_req_new(c, PROTO_OP_GROUP_STATUS, 0, 1, &r);
    if (rv != 0) {
        return rv;
    }
    (void)snprintf(what, sizeof what, "group status %.200s",
                   queue != NULL ? queue : "(null)");
    rv = proto_encode_group_status(&r->frame, 0, queue, group, after, max);
    return tern__sync_call(c, r, rv, what, status_done, out);
}

size_t tern_group_status_count(const struct tern_group_status_list *l,
                               int *more)
{
    if (more != NULL) {
        *more = l->r.more;
    }
    return l->r.n;
}

int tern_group_status_get(const struct tern_group_status_list *l,
                          size_t i,
                          struct tern_group_status *out)
{
    if (i >= l->r.n) {
        return TERN_EINVAL;
    }
    *out = l->groups[i].pub;
    return 0;
}

int tern_group_status_consumer(const struct tern_group_status_list *l,
                               size_t i,
                               size_t j,
                               uint64_t *id,
                               uint32_t *held)
{
    struct proto_status_consumer sc;
    if (i >= l->r.n || j >= l->groups[i].raw.n_consumers) {
        return TERN_EINVAL;
    }
    proto_status_consumer(&l->groups[i].raw, (uint32_t)j, &sc);
    *id = sc.id;
    *held = sc.held;
    return 0;
}
