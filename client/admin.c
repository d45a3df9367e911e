/*
 * libtern's administration calls (<tern/tern.h>, "Users, grants,
 * namespaces"): USER_*, ACL_* and NAMESPACE_* requests (proto.h ops
 * 10..18) and the list objects built from their answers.
 *
 * Writes are leader-only requests (engine.c follows the leader as for a
 * queue create; a delete retried after a lost answer that then finds
 * nothing reports success). Lists are reads: they go where read_from
 * says, after finding the leader like a queue list. A user's SCRAM
 * credential is derived here (auth_scram_cred_make) and only its binary
 * form (auth_scram_cred_encode) travels: never the password.
 *
 * List objects own NUL-terminated copies of every string; accessors
 * return them borrowed until the object's _free.
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
    struct tern__admin_entry *e;
};

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

/* Fill l from a validated list body of op. 0, TERN_EMALFORMED or
 * -ENOMEM (l then empty). */
static int admin_list_fill(struct tern__admin_list *l,
                           uint8_t op,
                           const uint8_t *body,
                           size_t len)
{
    struct proto_list_resp lr;
    size_t pos = 0;
    int failed = 0;
    int rv = proto_decode_list_resp(op, body, len, &lr);
    if (rv != 0) {
        return rv;
    }
    l->e = tern_calloc(lr.n != 0 ? lr.n : 1, sizeof *l->e);
    if (l->e == NULL) {
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < lr.n && !failed; k++) {
        struct tern__admin_entry *e = &l->e[l->n];
        int got = 0;
        if (op == PROTO_OP_USER_LIST) {
            struct proto_user_entry u;
            got = proto_next_user(&lr, &pos, &u);
            if (got) {
                e->a = dup_n(u.user, u.user_len, &failed);
                e->bits = u.flags;
                e->has = u.has_cred != 0;
            }
        } else if (op == PROTO_OP_ACL_LIST) {
            struct proto_acl_entry a;
            got = proto_next_acl(&lr, &pos, &a);
            if (got) {
                e->a = dup_n(a.user, a.user_len, &failed);
                e->b = dup_n(a.ns, a.ns_len, &failed);
                e->p = dup_n(a.pattern, a.pattern_len, &failed);
                e->bits = a.perms;
            }
        } else {
            struct proto_namespace_entry ns;
            got = proto_next_namespace(&lr, &pos, &ns);
            if (got) {
                e->a = dup_n(ns.ns, ns.ns_len, &failed);
                e->q[0] = ns.max_queues;
                e->q[1] = ns.max_bytes;
                e->q[2] = ns.produce_bytes_per_s;
            }
        }
        if (!got) {
            rv = TERN_EMALFORMED; /* cannot happen after the decode */
            break;
        }
        l->n++;
    }
    if (failed || rv != 0) {
        admin_list_clear(l);
        return failed ? -ENOMEM : rv;
    }
    return 0;
}

/* Run a list request r (encoded with enc) and fill l. */
static int admin_list(struct tern_client *c,
                      struct tern__req *r,
                      int enc,
                      const char *what,
                      struct tern__admin_list *l)
{
    uint8_t *body = NULL;
    size_t len = 0;
    uint8_t op = r->op;
    int rv = admin_run(c, r, enc, what, &body, &len);
    if (rv == 0) {
        rv = admin_list_fill(l, op, body, len);
        if (rv == TERN_EMALFORMED) {
            tern_errmsg_printf(c->errmsg, "%s: bad answer", what);
        }
    }
    tern_free(body);
    return rv;
}

int tern_user_list(struct tern_client *c, struct tern_user_list **out)
{
    struct tern_user_list *l;
    struct tern__req *r;
    int rv;
    *out = NULL;
    r = admin_req(c, PROTO_OP_USER_LIST, &rv);
    if (r == NULL) {
        return rv;
    }
    l = tern_calloc(1, sizeof *l);
    if (l == NULL) {
        tern__req_free(r);
        return -ENOMEM;
    }
    rv = proto_encode_simple(&r->frame, PROTO_OP_USER_LIST, 0);
    rv = admin_list(c, r, rv, "user list", &l->l);
    if (rv != 0) {
        tern_free(l);
        return rv;
    }
    *out = l;
    return 0;
}

int tern_acl_list(struct tern_client *c,
                  const char *user,
                  struct tern_acl_list **out)
{
    struct tern_acl_list *l;
    struct tern__req *r;
    int rv;
    *out = NULL;
    r = admin_req(c, PROTO_OP_ACL_LIST, &rv);
    if (r == NULL) {
        return rv;
    }
    l = tern_calloc(1, sizeof *l);
    if (l == NULL) {
        tern__req_free(r);
        return -ENOMEM;
    }
    rv = proto_encode_acl_list(&r->frame, 0, user);
    rv = admin_list(c, r, rv, "acl list", &l->l);
    if (rv != 0) {
        tern_free(l);
        return rv;
    }
    *out = l;
    return 0;
}

int tern_namespace_list(struct tern_client *c, struct tern_namespace_list **out)
{
    struct tern_namespace_list *l;
    struct tern__req *r;
    int rv;
    *out = NULL;
    r = admin_req(c, PROTO_OP_NAMESPACE_LIST, &rv);
    if (r == NULL) {
        return rv;
    }
    l = tern_calloc(1, sizeof *l);
    if (l == NULL) {
        tern__req_free(r);
        return -ENOMEM;
    }
    rv = proto_encode_simple(&r->frame, PROTO_OP_NAMESPACE_LIST, 0);
    rv = admin_list(c, r, rv, "namespace list", &l->l);
    if (rv != 0) {
        tern_free(l);
        return rv;
    }
    *out = l;
    return 0;
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
