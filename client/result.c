/*
 * libtern result objects: fetch results, queue lists and cluster status.
 * Each is built from an already validated response body, owns one copy of
 * the bytes it needs, and is freed by the caller with its _free function.
 * Accessors return pointers borrowed from the object.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client_int.h"

struct tern__fetched
{
    uint64_t offset;
    uint64_t timestamp_ms;
    const uint8_t *data; /* into body */
    size_t len;
    const uint8_t *props; /* into body; props_len 0: none */
    size_t props_len;
    uint32_t count; /* RECEIVE: the delivery count (0 otherwise) */
};

struct tern_fetch_result
{
    uint64_t next_offset;
    uint64_t end_offset;
    size_t n;
    struct tern__fetched *msgs;
    uint8_t *body;         /* copy of the response body */
    int with_props;        /* the answer carried properties and queue_id */
    uint64_t queue_id;     /* with_props */
    uint64_t start_offset; /* tern__fetch_result_set_start */
    uint64_t skipped;
};

int tern__fetch_decode(const void *body,
                       size_t len,
                       int mode,
                       struct proto_fetch_resp *fr,
                       struct proto_group_skip *skip)
{
    int base = mode & ~(TERN__RESULT_SKIP | TERN__RESULT_RUNS);
    int rv;
    memset(skip, 0, sizeof *skip);
    if ((mode & TERN__RESULT_SKIP) != 0) {
        /* The skip tail is the body's last PROTO_GROUP_SKIP_SIZE bytes,
         * after the messages (and the queue id of an answer with
         * properties): u64 skipped, u64 first_offset (proto.h). */
        const uint8_t *tail;
        if (len < PROTO_GROUP_SKIP_SIZE) {
            memset(fr, 0, sizeof *fr);
            return TERN_EMALFORMED;
        }
        len -= PROTO_GROUP_SKIP_SIZE;
        tail = (const uint8_t *)body + len;
        skip->skipped = tern_get_u64(tail);
        skip->first_offset = tern_get_u64(tail + 8);
        if (skip->skipped > skip->first_offset) {
            memset(skip, 0, sizeof *skip);
            memset(fr, 0, sizeof *fr);
            return TERN_EMALFORMED;
        }
    }
    if ((mode & TERN__RESULT_RUNS) != 0 &&
        (base == TERN__RESULT_PLAIN || base == TERN__RESULT_PROPS)) {
        rv = proto_decode_fetch_runs_resp(body, len, base == TERN__RESULT_PROPS,
                                          fr);
        if (rv != 0) {
            memset(skip, 0, sizeof *skip);
        }
        return rv;
    }
    rv = base == TERN__RESULT_RECV ? proto_decode_receive_resp(body, len, fr)
         : base == TERN__RESULT_GET
             ? proto_decode_message_get_resp(body, len, fr)
         : base == TERN__RESULT_PROPS
             ? proto_decode_fetch_props_resp(body, len, fr)
             : proto_decode_fetch_resp(body, len, fr);
    if (rv != 0) {
        memset(skip, 0, sizeof *skip);
    }
    return rv;
}

struct tern_fetch_result *tern__fetch_result_new(uint8_t **body,
                                                 size_t len,
                                                 int mode)
{
    struct proto_fetch_resp fr;
    struct proto_group_skip skip;
    struct proto_fetched_msg m;
    struct proto_fetch_iter it = {0};
    struct tern_fetch_result *r;
    r = tern_calloc(1, sizeof *r);
    if (r == NULL) {
        return NULL;
    }
    if (tern__fetch_decode(*body, len, mode, &fr, &skip) != 0) {
        goto err_after_alloc;
    }
    r->start_offset = skip.first_offset;
    r->skipped = skip.skipped;
    r->with_props = fr.with_props;
    r->queue_id = fr.queue_id;
    r->next_offset = fr.next_offset;
    r->end_offset = fr.end_offset;
    r->msgs = tern_malloc((fr.n != 0 ? fr.n : 1) * sizeof *r->msgs);
    if (r->msgs == NULL) {
        goto err_after_alloc;
    }
    uint32_t count = 0;
    while (r->n < fr.n &&
           (fr.with_counts ? proto_next_received(&fr, &it.pos, &m, &count)
                           : proto_fetch_iter_next(&fr, &it, &m))) {
        r->msgs[r->n].count = count;
        r->msgs[r->n].offset = m.offset;
        r->msgs[r->n].timestamp_ms = m.timestamp_ms;
        r->msgs[r->n].data = m.data;
        r->msgs[r->n].len = m.len;
        r->msgs[r->n].props = m.props;
        r->msgs[r->n].props_len = m.props_len;
        r->n++;
    }
    r->body = *body; /* the messages point into it: now the result's */
    *body = NULL;
    return r;

err_after_alloc:
    tern_free(r);
    return NULL;
}

void tern__fetch_result_set_start(struct tern_fetch_result *r,
                                  uint64_t start_offset,
                                  uint64_t skipped)
{
    r->start_offset = start_offset;
    r->skipped = skipped;
}

uint64_t tern_fetch_result_skipped(const struct tern_fetch_result *r)
{
    return r != NULL ? r->skipped : 0;
}

uint64_t tern_fetch_result_start_offset(const struct tern_fetch_result *r)
{
    return r != NULL ? r->start_offset : 0;
}

size_t tern_fetch_result_count(const struct tern_fetch_result *r)
{
    return r != NULL ? r->n : 0;
}

uint64_t tern_fetch_result_next_offset(const struct tern_fetch_result *r)
{
    return r != NULL ? r->next_offset : 0;
}

uint64_t tern_fetch_result_end_offset(const struct tern_fetch_result *r)
{
    return r != NULL ? r->end_offset : 0;
}

int tern_fetch_result_get(const struct tern_fetch_result *r,
                          size_t i,
                          uint64_t *offset,
                          uint64_t *timestamp_ms,
                          const void **data,
                          size_t *len)
{
    if (r == NULL || i >= r->n) {
        return TERN_EINVAL;
    }
    if (offset != NULL) {
        *offset = r->msgs[i].offset;
    }
    if (timestamp_ms != NULL) {
        *timestamp_ms = r->msgs[i].timestamp_ms;
    }
    if (data != NULL) {
        *data = r->msgs[i].data;
    }
    if (len != NULL) {
        *len = r->msgs[i].len;
    }
    return 0;
}

int tern_fetch_result_props(const struct tern_fetch_result *r,
                            size_t i,
                            struct tern_message_props *out)
{
    if (r == NULL || i >= r->n || out == NULL) {
        return TERN_EINVAL;
    }
    memset(out, 0, sizeof *out);
    out->append_ts_ms = r->msgs[i].timestamp_ms;
    if (tern__props_decode(r->msgs[i].props, r->msgs[i].props_len, out) != 0) {
        return TERN_EMALFORMED;
    }
    if (r->with_props) {
        (void)snprintf(out->id, sizeof out->id, "%016llx%016llx",
                       (unsigned long long)r->queue_id,
                       (unsigned long long)r->msgs[i].offset);
    }
    return 0;
}

int tern_fetch_result_header(const struct tern_fetch_result *r,
                             size_t i,
                             size_t h,
                             const char **name,
                             size_t *name_len,
                             const void **value,
                             size_t *value_len)
{
    if (r == NULL || i >= r->n) {
        return TERN_EINVAL;
    }
    return tern__props_header(r->msgs[i].props, r->msgs[i].props_len, h, name,
                              name_len, value, value_len);
}

void tern_fetch_result_free(struct tern_fetch_result *r)
{
    if (r == NULL) {
        return;
    }
    tern_free(r->msgs);
    tern_free(r->body);
    tern_free(r);
}

/* ---- Queue lists ---- */

struct tern__queue
{
    char *name; /* owned */
    uint64_t start_offset;
    uint64_t next_offset;
};

struct tern_queue_list
{
    size_t n;
    struct tern__queue *q;
};

int tern__queue_list_add(struct tern_queue_list *l,
                         const void *body,
                         size_t len,
                         int *more)
{
    struct proto_queue_list_resp ql;
    struct proto_queue_info qi;
    struct tern__queue *q;
    size_t pos = 0;
    size_t n0 = l->n;
    *more = 0;
    if (proto_decode_queue_list_resp(body, len, &ql) != 0) {
        return TERN_EMALFORMED;
    }
    if (ql.n > 0) {
        q = tern_realloc(l->q, (l->n + ql.n) * sizeof *l->q);
        if (q == NULL) {
            return -ENOMEM;
        }
        l->q = q;
    }
    while (l->n < n0 + ql.n && proto_next_queue_info(&ql, &pos, &qi)) {
        q = &l->q[l->n];
        q->name = tern_malloc((size_t)qi.name_len + 1);
        if (q->name == NULL) {
            while (l->n > n0) {
                tern_free(l->q[--l->n].name);
            }
            return -ENOMEM;
        }
        memcpy(q->name, qi.name, qi.name_len);
        q->name[qi.name_len] = '\0';
        q->start_offset = qi.start_offset;
        q->next_offset = qi.next_offset;
        l->n++;
    }
    *more = ql.more;
    return 0;
}

struct tern_queue_list *tern__queue_list_new_empty(void)
{
    return tern_calloc(1, sizeof(struct tern_queue_list));
}

struct tern_queue_list *tern__queue_list_new(const void *body, size_t len)
{
    struct tern_queue_list *l = tern_calloc(1, sizeof *l);
    int more;
    if (l == NULL) {
        return NULL;
    }
    if (tern__queue_list_add(l, body, len, &more) != 0) {
        tern_queue_list_free(l);
        return NULL;
    }
    return l;
}

size_t tern_queue_list_count(const struct tern_queue_list *l)
{
    return l != NULL ? l->n : 0;
}

const char *tern_queue_list_name(const struct tern_queue_list *l, size_t i)
{
    return l != NULL && i < l->n ? l->q[i].name : NULL;
}

uint64_t tern_queue_list_start_offset(const struct tern_queue_list *l, size_t i)
{
    return l != NULL && i < l->n ? l->q[i].start_offset : 0;
}

uint64_t tern_queue_list_next_offset(const struct tern_queue_list *l, size_t i)
{
    return l != NULL && i < l->n ? l->q[i].next_offset : 0;
}

void tern_queue_list_free(struct tern_queue_list *l)
{
    if (l == NULL) {
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        tern_free(l->q[i].name);
    }
    tern_free(l->q);
    tern_free(l);
}

/* ---- Cluster status ---- */

struct tern__member
{
    uint64_t id;
    char *raft_address;   /* owned */
    char *client_address; /* owned */
    int role;             /* enum tern_member_role, -1 unknown */
};

struct tern_status
{
    char *server; /* owned */
    uint64_t node_id;
    int role;
    uint64_t leader_id;
    char *leader_address; /* owned */
    uint64_t term;
    uint64_t commit_index;
    uint64_t last_applied;
    int writable;
    char *transport;  /* owned */
    char *durability; /* owned */
    size_t n;
    struct tern__member *members;
    int has_timers; /* the timer tail was in the answer */
    uint64_t timers_pending;
    uint64_t timers_oldest_due_ms;
    int self_role; /* enum tern_member_role, -1 unknown */
    char *version; /* owned; "" from a server that predates it */
};

static char *dup_str(const char *s, size_t len)
{
    char *d = tern_malloc(len + 1);
    if (d != NULL) {
        if (len != 0) {
            memcpy(d, s, len);
        }
        d[len] = '\0';
    }
    return d;
}

struct tern_status *tern__status_new(const char *server,
                                     const void *body,
                                     size_t len)
{
    struct proto_status ps;
    struct proto_member pm;
    struct tern_status *s;
    size_t pos = 0;
    if (proto_decode_status_resp(body, len, &ps) != 0) {
        return NULL;
    }
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        return NULL;
    }
    s->node_id = ps.node_id;
    s->role = ps.role;
    s->leader_id = ps.leader_id;
    s->term = ps.term;
    s->commit_index = ps.commit_index;
    s->last_applied = ps.last_applied;
    s->writable = ps.writable;
    s->has_timers = ps.has_timers;
    s->timers_pending = ps.timers_pending;
    s->timers_oldest_due_ms = ps.timers_oldest_due_ms;
    s->self_role = ps.has_membership ? ps.self_role : -1;
    s->server = dup_str(server, strlen(server));
    s->leader_address = dup_str(ps.leader_address, ps.leader_address_len);
    s->transport = dup_str(ps.transport, ps.transport_len);
    s->durability = dup_str(ps.durability, ps.durability_len);
    s->version = dup_str(ps.server_version, ps.server_version_len);
    s->members =
        tern_calloc(ps.n_members != 0 ? ps.n_members : 1, sizeof *s->members);
    if (s->server == NULL || s->leader_address == NULL ||
        s->transport == NULL || s->durability == NULL || s->version == NULL ||
        s->members == NULL) {
        goto err;
    }
    while (s->n < ps.n_members && proto_next_member(&ps, &pos, &pm)) {
        struct tern__member *m = &s->members[s->n];
        m->id = pm.id;
        m->raft_address = dup_str(pm.raft_address, pm.raft_address_len);
        m->client_address = dup_str(pm.client_address, pm.client_address_len);
        m->role = ps.has_membership && s->n < ps.n_member_roles
                      ? ps.member_roles[s->n]
                      : -1;
        s->n++;
        if (m->raft_address == NULL || m->client_address == NULL) {
            goto err;
        }
    }
    return s;

err:
    tern_status_free(s);
    return NULL;
}

const char *tern_role_name(int role)
{
    switch (role) {
    case TERN_ROLE_UNAVAILABLE:
        return "unavailable";
    case TERN_ROLE_FOLLOWER:
        return "follower";
    case TERN_ROLE_CANDIDATE:
        return "candidate";
    case TERN_ROLE_LEADER:
        return "leader";
    default:
        return "unknown";
    }
}

const char *tern_status_server(const struct tern_status *s)
{
    return s->server;
}
uint64_t tern_status_node_id(const struct tern_status *s)
{
    return s->node_id;
}
int tern_status_role(const struct tern_status *s)
{
    return s->role;
}
uint64_t tern_status_leader_id(const struct tern_status *s)
{
    return s->leader_id;
}
const char *tern_status_leader_address(const struct tern_status *s)
{
    return s->leader_address;
}
uint64_t tern_status_term(const struct tern_status *s)
{
    return s->term;
}
uint64_t tern_status_commit_index(const struct tern_status *s)
{
    return s->commit_index;
}
uint64_t tern_status_last_applied(const struct tern_status *s)
{
    return s->last_applied;
}
int tern_status_writable(const struct tern_status *s)
{
    return s->writable;
}
const char *tern_status_transport(const struct tern_status *s)
{
    return s->transport;
}
const char *tern_status_durability(const struct tern_status *s)
{
    return s->durability;
}
size_t tern_status_member_count(const struct tern_status *s)
{
    return s->n;
}
uint64_t tern_status_member_id(const struct tern_status *s, size_t i)
{
    return i < s->n ? s->members[i].id : 0;
}
const char *tern_status_member_raft_address(const struct tern_status *s,
                                            size_t i)
{
    return i < s->n ? s->members[i].raft_address : NULL;
}
const char *tern_status_member_client_address(const struct tern_status *s,
                                              size_t i)
{
    return i < s->n ? s->members[i].client_address : NULL;
}

void tern_status_free(struct tern_status *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        tern_free(s->members[i].raft_address);
        tern_free(s->members[i].client_address);
    }
    tern_free(s->members);
    tern_free(s->server);
    tern_free(s->leader_address);
    tern_free(s->transport);
    tern_free(s->durability);
    tern_free(s->version);
    tern_free(s);
}

int tern_fetch_result_receipt(const struct tern_fetch_result *r,
                              size_t i,
                              struct tern_receipt *out)
{
    if (r == NULL || out == NULL || i >= r->n || r->msgs[i].count == 0) {
        return TERN_EINVAL;
    }
    out->offset = r->msgs[i].offset;
    out->count = r->msgs[i].count;
    return 0;
}

int tern_status_self_role(const struct tern_status *s)
{
    return s->self_role;
}

int tern_status_member_role(const struct tern_status *s, size_t i)
{
    return i < s->n ? s->members[i].role : -1;
}

const char *tern_member_role_name(int role)
{
    switch (role) {
    case TERN_MEMBER_STANDBY:
        return "standby";
    case TERN_MEMBER_VOTER:
        return "voter";
    case TERN_MEMBER_SPARE:
        return "spare";
    case TERN_MEMBER_ABSENT:
        return "absent";
    default:
        return "unknown";
    }
}

int tern_status_timers(const struct tern_status *s,
                       uint64_t *pending,
                       uint64_t *oldest_due_ms)
{
    *pending = s->timers_pending;
    *oldest_due_ms = s->timers_oldest_due_ms;
    return s->has_timers ? 0 : TERN_ENOTFOUND;
}
const char *tern_status_version(const struct tern_status *s)
{
    return s->version;
}
