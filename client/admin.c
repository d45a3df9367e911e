/*
 * libtern's administration calls (<tern/tern.h>, "Users, grants,
 * namespaces"): USER_*, ACL_* and NAMESPACE_* requests (proto.h ops
 * 10..18) and the list objects built from their answers; BACKUP (op 36,
 * "Backups"), sent to one server and never retried elsewhere.
 *
 * Writes are leader-only requests (engine.c follows the leader as for a
 * queue create; a delete retried after a lost answer that then finds
 * nothing reports success). Lists are reads: they go where read_from
 * says, after finding the leader like a queue list. A user's SCRAM
 * credential is derived here (auth_scram_cred_make) and only its binary
 * form (auth_scram_cred_encode) travels: never the password.
 *
 * List objects own NUL-terminated copies of every string; accessors
 * return them borrowed until the object's _free. The list calls walk the
 * server's pages (proto.h: each request after the last entry of the page
 * before) and return one whole list of at most TERN_ADMIN_LIST_MAX
 * entries.
 */
#include <errno.h>
#include <string.h>

#include "client_int.h"

/* ---- Requests ---- */

/* Run r (encoded, or enc != 0: its encoder's failure, what names the
 * call in errmsg), free it, return its status. body_out: when not NULL,
 * the successful answer's body is moved there (caller-owned, tern_free)
 * with its length. */
static int admin_run(struct tern_client *c,
                     struct tern__req *r,
                     int enc,
                     const char *what,
                     uint8_t **body_out,
                     size_t *len_out)
{
    int rv;
    if (enc != 0) {
        if (enc == TERN_EBADNAME) {
            tern_errmsg_printf(c->errmsg,
                               "%s: a user is 1..%u and a namespace 1..%u "
                               "bytes of [A-Za-z0-9._-]; a pattern is a "
                               "queue name, a prefix and '*', or '*'",
                               what, PROTO_MAX_USER, PROTO_MAX_NAMESPACE);
        } else {
            tern_errmsg_printf(c->errmsg, "%s: %s", what, tern_strerror(enc));
        }
        tern__req_free(r);
        return enc;
    }
    rv = tern__run_sync(c, r);
    if (rv == 0 && body_out != NULL) {
        *body_out = r->body;
        *len_out = r->body_len;
        r->body = NULL;
    }
    tern__req_free(r);
    return rv;
}

/* A request for op (a read finds the leader first, as queue list does).
 * NULL with errmsg when the call is refused or on ENOMEM; *rv the code. */
static struct tern__req *admin_req(struct tern_client *c, uint8_t op, int *rv)
{
    struct tern__req *r;
    if (c->in_callback) {
        tern_errmsg_printf(c->errmsg,
                           "synchronous call from a completion callback");
        *rv = TERN_EINVAL;
        return NULL;
    }
    c->errmsg[0] = '\0';
    if (op == PROTO_OP_USER_LIST || op == PROTO_OP_ACL_LIST ||
        op == PROTO_OP_NAMESPACE_LIST) {
        tern__find_leader(c);
    }
    r = tern__req_new(c, op, 0);
    *rv = r != NULL ? 0 : -ENOMEM;
    return r;
}

#define TERN__USER_FLAGS (TERN_USER_ADMIN | TERN_USER_CERT)

/* USER_SET with a binary credential cred[0..len) (len 0: none). */
static int user_set_bin(struct tern_client *c,
                        const char *user,
                        const uint8_t *cred,
                        size_t len,
                        uint32_t flags)
{
    struct tern__req *r;
    int rv;
    if ((flags & ~TERN__USER_FLAGS) != 0) {
        tern_errmsg_printf(c->errmsg, "user set: unknown flags 0x%x", flags);
        return TERN_EINVAL;
    }
    if (len == 0 && (flags & TERN_USER_CERT) == 0) {
        tern_errmsg_printf(c->errmsg,
                           "user set: a user without a password must have "
                           "the cert flag");
        return TERN_EINVAL;
    }
    r = admin_req(c, PROTO_OP_USER_SET, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_user_set(&r->frame, 0, user != NULL ? user : "", flags,
                               cred, (uint32_t)len);
    return admin_run(c, r, rv, "user set", NULL, NULL);
}

int tern_credential_make(const char *password,
                         uint32_t iterations,
                         char *buf,
                         size_t cap)
{
    struct auth_scram_cred cred;
    char why[TERN_ERRMSG_SIZE];
    int rv;
    if (password == NULL || buf == NULL || cap < TERN_CREDENTIAL_TEXT_MAX) {
        return TERN_EINVAL;
    }
    rv = auth_scram_cred_make(password, iterations, &cred, why);
    if (rv == 0) {
        rv = auth_scram_cred_format(&cred, buf, cap, why);
    }
    auth_wipe(&cred, sizeof cred);
    return rv;
}

int tern_user_set(struct tern_client *c,
                  const char *user,
                  const char *password,
                  uint32_t flags)
{
    struct auth_scram_cred cred;
    uint8_t bin[AUTH_SCRAM_CRED_ENC_MAX];
    size_t len = 0;
    int rv;
    if (password != NULL) {
        rv = auth_scram_cred_make(password, 0, &cred, c->errmsg);
        if (rv == 0) {
            rv =
                auth_scram_cred_encode(&cred, bin, sizeof bin, &len, c->errmsg);
        }
        auth_wipe(&cred, sizeof cred);
        if (rv != 0) {
            auth_wipe(bin, sizeof bin);
            return rv;
        }
    }
    rv = user_set_bin(c, user, bin, len, flags);
    auth_wipe(bin, sizeof bin);
    return rv;
}

int tern_user_set_cred(struct tern_client *c,
                       const char *user,
                       const char *cred_text,
                       uint32_t flags)
{
    struct auth_scram_cred cred;
    uint8_t bin[AUTH_SCRAM_CRED_ENC_MAX];
    size_t len = 0;
    int rv;
    if (cred_text != NULL && cred_text[0] != '\0') {
        rv = auth_scram_cred_parse(cred_text, strlen(cred_text), &cred,
                                   c->errmsg);
        if (rv == 0) {
            rv =
                auth_scram_cred_encode(&cred, bin, sizeof bin, &len, c->errmsg);
        }
        auth_wipe(&cred, sizeof cred);
        if (rv != 0) {
            return rv;
        }
    }
    rv = user_set_bin(c, user, bin, len, flags);
    auth_wipe(bin, sizeof bin);
    return rv;
}

/* USER_DELETE or NAMESPACE_DELETE of name. */
static int name_delete(struct tern_client *c, uint8_t op, const char *name)
{
    int rv;
    struct tern__req *r = admin_req(c, op, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_name_op(&r->frame, op, 0, name != NULL ? name : "");
    return admin_run(
        c, r, rv,
        op == PROTO_OP_USER_DELETE ? "user delete" : "namespace delete", NULL,
        NULL);
}

int tern_user_delete(struct tern_client *c, const char *user)
{
    return name_delete(c, PROTO_OP_USER_DELETE, user);
}

int tern_acl_set(struct tern_client *c,
                 const char *user,
                 const char *ns,
                 const char *pattern,
                 uint32_t perms)
{
    int rv;
    struct tern__req *r;
    if (perms == 0 || (perms & ~TERN_PERM_ALL) != 0) {
        tern_errmsg_printf(c->errmsg, "acl set: permissions 0x%x (1..0xf)",
                           perms);
        return TERN_EINVAL;
    }
    r = admin_req(c, PROTO_OP_ACL_SET, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_acl_op(&r->frame, PROTO_OP_ACL_SET, 0,
                             user != NULL ? user : "", ns != NULL ? ns : "",
                             pattern != NULL ? pattern : "", perms);
    return admin_run(c, r, rv, "acl set", NULL, NULL);
}

int tern_acl_delete(struct tern_client *c,
                    const char *user,
                    const char *ns,
                    const char *pattern)
{
    int rv;
    struct tern__req *r = admin_req(c, PROTO_OP_ACL_DELETE, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_acl_op(&r->frame, PROTO_OP_ACL_DELETE, 0,
                             user != NULL ? user : "", ns != NULL ? ns : "",
                             pattern != NULL ? pattern : "", 0);
    return admin_run(c, r, rv, "acl delete", NULL, NULL);
}

int tern_namespace_set(struct tern_client *c,
                       const char *ns,
                       uint64_t max_queues,
                       uint64_t max_bytes,
                       uint64_t produce_bytes_per_s)
{
    int rv;
    struct tern__req *r = admin_req(c, PROTO_OP_NAMESPACE_SET, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_namespace_set(&r->frame, 0, ns != NULL ? ns : "",
                                    max_queues, max_bytes, produce_bytes_per_s);
    return admin_run(c, r, rv, "namespace set", NULL, NULL);
}

int tern_namespace_delete(struct tern_client *c, const char *ns)
{
    return name_delete(c, PROTO_OP_NAMESPACE_DELETE, ns);
}

/* ---- Leadership transfer ---- */

int tern_cluster_transfer(struct tern_client *c,
                          uint64_t to_id,
                          uint64_t *new_leader)
{
    uint8_t *body = NULL;
    size_t len = 0;
    uint64_t leader = 0, term = 0;
    int rv;
    struct tern__req *r = admin_req(c, PROTO_OP_CLUSTER_TRANSFER, &rv);
    if (r == NULL) {
        return rv;
    }
    rv = proto_encode_cluster_transfer(&r->frame, 0, to_id);
    rv = admin_run(c, r, rv, "leadership transfer", &body, &len);
    if (rv == 0) {
        rv = proto_decode_cluster_transfer_resp(body, len, &leader, &term);
    }
    tern_free(body);
    if (rv == 0 && new_leader != NULL) {
        *new_leader = leader;
    }
    return rv;
}

/* ---- List objects ---- */

/* One entry of any of the three lists. */
struct tern__admin_entry
{
    char *a; /* user / user / namespace */
    char *b; /* -    / namespace / - */
    char *p; /* -    / pattern / - */
    uint32_t bits;
    int has;
    uint64_t q[3];
};

struct tern__admin_list
{
    size_t n;
    size_t cap;
    struct tern__admin_entry *e;
};

/* The public list types: each is its entries and nothing else, so that
 * admin_list_get allocates them all as a struct tern__admin_list. */
struct tern_user_list
{
    struct tern__admin_list l;
};
struct tern_acl_list
{
    struct tern__admin_list l;
};
struct tern_namespace_list
{
    struct tern__admin_list l;
};

static void admin_list_clear(struct tern__admin_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        tern_free(l->e[i].a);
        tern_free(l->e[i].b);
        tern_free(l->e[i].p);
    }
    tern_free(l->e);
    l->e = NULL;
    l->n = 0;
    l->cap = 0;
}

static char *dup_n(const char *s, size_t n, int *failed)
{
    char *d = tern_malloc(n + 1);
    if (d == NULL) {
        *failed = 1;
        return NULL;
    }
    if (n > 0) {
        memcpy(d, s, n);
    }
    d[n] = '\0';
    return d;
}

/* Read the row at *pos of a decoded answer into e (strings copied; a
 * failed copy sets *failed): 1, or 0 at the end. */
typedef int (*admin_row_cb)(const struct proto_list_resp *lr,
                            size_t *pos,
                            struct tern__admin_entry *e,
                            int *failed);

static int user_row(const struct proto_list_resp *lr,
                    size_t *pos,
                    struct tern__admin_entry *e,
                    int *failed)
{
    struct proto_user_entry u;
    if (!proto_next_user(lr, pos, &u)) {
        return 0;
    }
    e->a = dup_n(u.user, u.user_len, failed);
    e->bits = u.flags;
    e->has = u.has_cred != 0;
    return 1;
}

static int acl_row(const struct proto_list_resp *lr,
                   size_t *pos,
                   struct tern__admin_entry *e,
                   int *failed)
{
    struct proto_acl_entry a;
    if (!proto_next_acl(lr, pos, &a)) {
        return 0;
    }
    e->a = dup_n(a.user, a.user_len, failed);
    e->b = dup_n(a.ns, a.ns_len, failed);
    e->p = dup_n(a.pattern, a.pattern_len, failed);
    e->bits = a.perms;
    return 1;
}

static int namespace_row(const struct proto_list_resp *lr,
                         size_t *pos,
                         struct tern__admin_entry *e,
                         int *failed)
{
    struct proto_namespace_entry ns;
    if (!proto_next_namespace(lr, pos, &ns)) {
        return 0;
    }
    e->a = dup_n(ns.ns, ns.ns_len, failed);
    e->q[0] = ns.max_queues;
    e->q[1] = ns.max_bytes;
    e->q[2] = ns.produce_bytes_per_s;
    return 1;
}

/* One kind of list: its request op, its name in errmsg, its row reader. */
struct admin_kind
{
    uint8_t op;
    const char *what;
    admin_row_cb row;
};

static const struct admin_kind user_kind = {PROTO_OP_USER_LIST, "user list",
                                            user_row};
static const struct admin_kind acl_kind = {PROTO_OP_ACL_LIST, "acl list",
                                           acl_row};
static const struct admin_kind namespace_kind = {
    PROTO_OP_NAMESPACE_LIST, "namespace list", namespace_row};

/* Append the rows of one answer body of kind k to l; *more (OUT): the
 * answer is a page and more follow. 0, TERN_EMALFORMED, TERN_ELIMIT
 * (past TERN_ADMIN_LIST_MAX entries) or -ENOMEM; on failure l keeps the
 * rows of the earlier answers. */
static int admin_list_fill(struct tern__admin_list *l,
                           const struct admin_kind *k,
                           const uint8_t *body,
                           size_t len,
                           int *more)
{
    struct proto_list_resp lr;
    size_t pos = 0;
    size_t n0 = l->n;
    int failed = 0;
    int rv = proto_decode_list_resp(k->op, body, len, &lr);
    *more = 0;
    if (rv != 0) {
        return rv;
    }
    if (lr.n > TERN_ADMIN_LIST_MAX - l->n) {
        return TERN_ELIMIT;
    }
    if (l->n + lr.n > l->cap || l->e == NULL) {
        size_t cap = TERN_MAX(l->n + lr.n, l->cap * 2);
        struct tern__admin_entry *e =
            tern_realloc(l->e, (cap != 0 ? cap : 1) * sizeof *e);
        if (e == NULL) {
            return -ENOMEM;
        }
        l->e = e;
        l->cap = cap;
    }
    for (uint32_t i = 0; i < lr.n && !failed; i++) {
        struct tern__admin_entry *e = &l->e[l->n];
        memset(e, 0, sizeof *e);
        l->n++; /* counted now so that a failed copy is freed */
        if (!k->row(&lr, &pos, e, &failed)) {
            rv = TERN_EMALFORMED; /* cannot happen after the decode */
            break;
        }
    }
    if (failed || rv != 0) {
        while (l->n > n0) {
            struct tern__admin_entry *e = &l->e[--l->n];
            tern_free(e->a);
            tern_free(e->b);
            tern_free(e->p);
        }
        return failed ? -ENOMEM : rv;
    }
    *more = lr.paged && lr.more;
    return 0;
}

static int str_cmp(const char *x, const char *y)
{
    return strcmp(x != NULL ? x : "", y != NULL ? y : "");
}

/* The order of the entries in a list (a grant's key is user, namespace,
 * pattern; the other lists have a name only). */
static int entry_cmp(const struct tern__admin_entry *x,
                     const struct tern__admin_entry *y)
{
    int c = str_cmp(x->a, y->a);
    if (c == 0) {
        c = str_cmp(x->b, y->b);
    }
    return c != 0 ? c : str_cmp(x->p, y->p);
}

/* Ask for the pages of list kind k (ACL_LIST: of user's grants, NULL or
 * "" for everyone's) one after another, each after the last entry of the
 * one before, and append them to l until a page says it is the last (or
 * an older server answers unpaged). On failure l holds what was read. */
static int admin_list_walk(struct tern_client *c,
                           const struct admin_kind *k,
                           const char *user,
                           struct tern__admin_list *l)
{
    int more = 1;
    int rv = 0;
    while (more) {
        struct proto_list_cursor after = {NULL, NULL, NULL};
        size_t n0 = l->n;
        uint8_t *body = NULL;
        size_t len = 0;
        struct tern__req *r = admin_req(c, k->op, &rv);
        if (r == NULL) {
            break;
        }
        if (n0 > 0) {
            after.name = l->e[n0 - 1].a;
            after.ns = l->e[n0 - 1].b;
            after.pattern = l->e[n0 - 1].p;
        }
        rv = proto_encode_list_page_req(&r->frame, k->op, 0, user,
                                        n0 > 0 ? &after : NULL, 0);
        rv = admin_run(c, r, rv, k->what, &body, &len);
        if (rv == 0) {
            rv = admin_list_fill(l, k, body, len, &more);
        }
        tern_free(body);
        if (rv == TERN_EMALFORMED) {
            tern_errmsg_printf(c->errmsg, "%s: bad answer", k->what);
        } else if (rv == TERN_ELIMIT) {
            tern_errmsg_printf(c->errmsg, "%s: more than %u entries", k->what,
                               (unsigned)TERN_ADMIN_LIST_MAX);
        }
        if (rv != 0) {
            break;
        }
        /* A page that says "more" must list something beyond its cursor. */
        if (more && (l->n == n0 || (n0 > 0 && entry_cmp(&l->e[l->n - 1],
                                                        &l->e[n0 - 1]) <= 0))) {
            tern_errmsg_printf(c->errmsg, "%s: page does not advance", k->what);
            rv = TERN_EMALFORMED;
            break;
        }
    }
    return rv;
}

/* A new list object of size bytes (one of the public list types, which
 * are a struct tern__admin_list) holding every entry of list kind k.
 * NULL with *rv the code and errmsg on failure. */
static void *admin_list_get(struct tern_client *c,
                            const struct admin_kind *k,
                            const char *user,
                            size_t size,
                            int *rv)
{
    struct tern__admin_list *l = tern_calloc(1, size);
    if (l == NULL) {
        *rv = -ENOMEM;
        return NULL;
    }
    *rv = admin_list_walk(c, k, user, l);
    if (*rv != 0) {
        admin_list_clear(l);
        tern_free(l);
        return NULL;
    }
    return l;
}

int tern_user_list(struct tern_client *c, struct tern_user_list **out)
{
    int rv;
    *out = admin_list_get(c, &user_kind, NULL, sizeof **out, &rv);
    return rv;
}

int tern_acl_list(struct tern_client *c,
                  const char *user,
                  struct tern_acl_list **out)
{
    int rv;
    *out = admin_list_get(c, &acl_kind, user, sizeof **out, &rv);
    return rv;
}

int tern_namespace_list(struct tern_client *c, struct tern_namespace_list **out)
{
    int rv;
    *out = admin_list_get(c, &namespace_kind, NULL, sizeof **out, &rv);
    return rv;
}

/* Entry i of l, or NULL when l is NULL or i out of range. */
static const struct tern__admin_entry *entry(const struct tern__admin_list *l,
                                             size_t i)
{
    return i < l->n ? &l->e[i] : NULL;
}

size_t tern_user_list_count(const struct tern_user_list *l)
{
    return l != NULL ? l->l.n : 0;
}

const char *tern_user_list_name(const struct tern_user_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->a : NULL;
}

uint32_t tern_user_list_flags(const struct tern_user_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->bits : 0;
}

int tern_user_list_has_password(const struct tern_user_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->has : 0;
}

void tern_user_list_free(struct tern_user_list *l)
{
    if (l != NULL) {
        admin_list_clear(&l->l);
        tern_free(l);
    }
}

size_t tern_acl_list_count(const struct tern_acl_list *l)
{
    return l != NULL ? l->l.n : 0;
}

const char *tern_acl_list_user(const struct tern_acl_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->a : NULL;
}

const char *tern_acl_list_namespace(const struct tern_acl_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->b : NULL;
}

const char *tern_acl_list_pattern(const struct tern_acl_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->p : NULL;
}

uint32_t tern_acl_list_perms(const struct tern_acl_list *l, size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->bits : 0;
}

void tern_acl_list_free(struct tern_acl_list *l)
{
    if (l != NULL) {
        admin_list_clear(&l->l);
        tern_free(l);
    }
}

size_t tern_namespace_list_count(const struct tern_namespace_list *l)
{
    return l != NULL ? l->l.n : 0;
}

const char *tern_namespace_list_name(const struct tern_namespace_list *l,
                                     size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->a : NULL;
}

uint64_t tern_namespace_list_max_queues(const struct tern_namespace_list *l,
                                        size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->q[0] : 0;
}

uint64_t tern_namespace_list_max_bytes(const struct tern_namespace_list *l,
                                       size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->q[1] : 0;
}

uint64_t tern_namespace_list_produce_bytes_per_s(
    const struct tern_namespace_list *l,
    size_t i)
{
    const struct tern__admin_entry *e = l != NULL ? entry(&l->l, i) : NULL;
    return e != NULL ? e->q[2] : 0;
}

void tern_namespace_list_free(struct tern_namespace_list *l)
{
    if (l != NULL) {
        admin_list_clear(&l->l);
        tern_free(l);
    }
}

/* ---- Backups ---- */

/* The commit index of the writable leader, asked now: everything
 * acknowledged before is at or below it. Asks the server reads go to, then
 * the leader it names. */
static int leader_commit(struct tern_client *c, uint64_t *out)
{
    struct tern_status *st = NULL;
    char addr[256];
    int rv = tern_cluster_status(c, NULL, &st);
    if (rv == 0 && !(tern_status_role(st) == TERN_ROLE_LEADER &&
                     tern_status_writable(st))) {
        const char *la = tern_status_leader_address(st);
        size_t n = la != NULL ? strlen(la) : 0;
        if (n == 0 || n >= sizeof addr) {
            tern_status_free(st);
            tern_errmsg_printf(c->errmsg,
                               "backup: no writable leader known, so what "
                               "was acknowledged is unknown (--any-state "
                               "backs up the node as it is)");
            return TERN_ENOTLEADER;
        }
        memcpy(addr, la, n + 1);
        tern_status_free(st);
        st = NULL;
        rv = tern_cluster_status(c, addr, &st);
        if (rv == 0 && !(tern_status_role(st) == TERN_ROLE_LEADER &&
                         tern_status_writable(st))) {
            tern_status_free(st);
            tern_errmsg_printf(c->errmsg,
                               "backup: %s is no writable leader (an "
                               "election?): retry, or --any-state",
                               addr);
            return TERN_ENOTLEADER;
        }
    }
    if (rv != 0) {
        return rv;
    }
    *out = tern_status_commit_index(st);
    tern_status_free(st);
    return 0;
}

int tern_admin_backup(struct tern_client *c,
                      const char *address,
                      const char *dir,
                      uint32_t flags,
                      uint32_t timeout_ms,
                      struct tern_backup_info *out)
{
    struct tern__req *r;
    struct proto_backup_info b;
    const char *server;
    uint64_t min_applied = 0;
    size_t n;
    int rv;
    if (out != NULL) {
        memset(out, 0, sizeof *out);
    }
    if ((flags & ~(TERN_BACKUP_VERIFY | TERN_BACKUP_ANY_STATE)) != 0 ||
        dir == NULL || dir[0] != '/') {
        tern_errmsg_printf(c->errmsg,
                           "backup: the directory must be an absolute path "
                           "on the server's host");
        return TERN_EINVAL;
    }
    if ((flags & (TERN_BACKUP_VERIFY | TERN_BACKUP_ANY_STATE)) == 0) {
        rv = leader_commit(c, &min_applied);
        if (rv != 0) {
            return rv;
        }
    }
    rv = tern__sync_req_at(c, PROTO_OP_BACKUP, timeout_ms, address, &r);
    if (rv != 0) {
        return rv;
    }
    rv = proto_encode_backup(
        &r->frame, 0,
        (flags & TERN_BACKUP_VERIFY) != 0 ? (uint8_t)PROTO_BACKUP_VERIFY : 0,
        dir, min_applied);
    if (rv != 0) {
        tern_errmsg_printf(c->errmsg, "backup: path of 1..%u bytes",
                           PROTO_BACKUP_PATH_MAX);
        tern__req_free(r);
        return rv;
    }
    rv = tern__run_sync(c, r);
    if (rv == 0 && out != NULL) {
        /* on_success validated the body. */
        rv = proto_decode_backup_resp(r->body, r->body_len, &b);
        if (rv == 0) {
            server = c->servers[r->answered_by]->addr;
            n = TERN_MIN(strlen(server), sizeof out->server - 1);
            memcpy(out->server, server, n);
            n = TERN_MIN((size_t)b.cluster_len, sizeof out->cluster - 1);
            memcpy(out->cluster, b.cluster, n);
            out->node_id = b.node_id;
            out->term = b.term;
            out->last_applied = b.last_applied;
            out->log_start = b.log_start;
            out->log_end = b.log_end;
            out->n_files = b.n_files;
            out->total_bytes = b.total_bytes;
            out->created_ms = b.created_ms;
        }
    }
    tern__req_free(r);
    return rv;
}
