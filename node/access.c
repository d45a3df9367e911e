/*
 * Client authentication and authorization (access.h, docs/AUTH.md).
 *
 * The exchange: AUTH_START names a mechanism and a namespace. The
 * namespace must exist (NAMESPACE_SET; "default" always does). SCRAM:
 * the client-first-message names the user; the users table gives its
 * stored credential, or, for a user that does not exist or has no
 * password, the SCRAM server answers with a salt and iteration count
 * derived from a key (the cluster secret's MAC under "tern scram fake
 * key" when the node has one, so every node and restart answers alike;
 * else random per process), so that the answers do not tell users apart
 * from strangers; the proof then fails the same way. EXTERNAL: the TLS
 * client certificate's CN is the user, which must exist with the cert
 * flag. Every failure is TERN_EAUTH and the connection is closed by the
 * caller. A connection authenticates once.
 *
 * Checks read the replicated tables of the local index at every request
 * (LMDB read transactions: no cache to invalidate when grants change);
 * a user deleted (or deleted and created again) after a connection
 * authenticated is not the same user: its created_index no longer
 * matches, and the connection is refused everything but STATUS.
 *
 * Produce rate: a token bucket per namespace with a produce_bytes_per_s
 * quota, holding at most one second of bytes. A PRODUCE is let through
 * while the bucket is not empty and takes its bytes (the bucket may go
 * below zero by one batch), so the long-run rate is the quota and a batch
 * larger than a second's worth is not refused for ever. Buckets live in
 * a small chained hash, one per namespace that has a rate, and belong to
 * one incarnation of the namespace (its created_index) at one rate: a
 * bucket whose namespace was deleted, re-created or given another rate
 * (or none) is dropped, or started afresh, at the next check of its
 * namespace, and at the first PRODUCE after any change of the security
 * tables (idx_security_gen) every bucket is checked against the index
 * and the stale ones dropped. At most ACCESS__MAX_BUCKETS exist; a new
 * namespace beyond that takes the place of the least recently used.
 *
 * Login failures (server.c counts them, docs/AUTH.md "Login bounds"): a
 * table of at most auth_failure_sources source addresses, each with the
 * start of its one-minute window and the failures counted in it. An
 * address with auth_failures_per_minute failures in its window is refused
 * until the window ends; the next failure after it starts a new window.
 * Lookups go through a chained hash over the entries; when the table is
 * full, a new address takes the entry with the oldest window (an expired
 * one if any). An attacker with more source addresses than the table
 * holds can make the node forget addresses; each address is still held
 * to the cap while it is in the table, and connection caps still apply.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <auth.h>

#include "access.h"
#include "log.h"

#define ACCESS__BUCKETS        64u
#define ACCESS__MAX_BUCKETS    4096u /* rate buckets at most */
#define ACCESS__FAIL_WINDOW_MS 60000u
#define ACCESS__FAKE_LABEL     "tern scram fake key"
#define ACCESS__MAX_GRANTS     4096u /* a user's grants loaded for a list */
#define ACCESS__MAX_RATE       ((uint64_t)1 << 40) /* bytes/s, no overflow */
#define ACCESS__MECH_SCRAM     "SCRAM-SHA-256"
#define ACCESS__MECH_EXTERNAL  "EXTERNAL"

struct rate_bucket
{
    struct rate_bucket *next;
    char ns[TERN_NS_NAME_MAX + 1];
    uint64_t created_index; /* of the namespace it was set up for */
    uint64_t rate;          /* bytes/s the bucket was set up for */
    int64_t tokens;         /* bytes; <= rate */
    uint64_t last_ms;
    uint64_t used_ms; /* last charge (eviction of the least recent) */
};

/* One source address's login failures. next: index + 1 of the next entry
 * of its hash chain (of the free list while unused), 0 = end. */
struct fail_entry
{
    uint32_t ip;
    uint32_t count;
    uint64_t start_ms; /* start of its window */
    uint32_t next;
    bool used;
};

struct node_access
{
    const struct node_config *cfg;
    bool required;
    uint8_t fake_key[AUTH_SCRAM_KEY_SIZE];
    struct rate_bucket *buckets[ACCESS__BUCKETS];
    unsigned n_buckets;
    uint64_t bucket_gen;      /* idx_security_gen of the last sweep */
    struct fail_entry *fails; /* fail_cap entries */
    uint32_t *fail_heads;     /* fail_cap chains: index + 1, 0 = empty */
    uint32_t fail_free;       /* free list: index + 1, 0 = empty */
    unsigned fail_cap;
    unsigned fail_used;
};

int node_access_new(const struct node_config *cfg,
                    const struct auth_secret *secret,
                    struct node_access **out,
                    char *errmsg)
{
    struct node_access *a = tern_calloc(1, sizeof(*a));
    int rv = 0;

    if (a == NULL) {
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    a->cfg = cfg;
    a->required = node_config_client_auth(cfg);
    a->fail_cap = TERN_MAX(cfg->auth_failure_sources, 1u);
    a->fails = tern_calloc(a->fail_cap, sizeof(*a->fails));
    a->fail_heads = tern_calloc(a->fail_cap, sizeof(*a->fail_heads));
    if (a->fails == NULL || a->fail_heads == NULL) {
        node_access_free(a);
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    for (unsigned i = a->fail_cap; i > 0; i--) {
        a->fails[i - 1].next = a->fail_free;
        a->fail_free = i;
    }
    if (secret != NULL) {
        uint8_t mac[AUTH_MAC_SIZE];
        rv = auth_secret_mac(secret, ACCESS__FAKE_LABEL, NULL, 0, mac);
        memcpy(a->fake_key, mac, sizeof(a->fake_key));
        auth_wipe(mac, sizeof(mac));
    } else if (cfg->cluster_secret_file != NULL &&
               cfg->cluster_secret_file[0] != '\0') {
        /* The node loads the file before it makes the server; a
         * configured file without a secret is a caller's mistake, never a
         * reason to answer with a key other nodes do not share. */
        tern_errmsg_printf(errmsg,
                           "cluster_secret_file %s is configured but its "
                           "secret was not loaded",
                           cfg->cluster_secret_file);
        node_access_free(a);
        return TERN_EINVAL;
    } else {
        rv = auth_random(a->fake_key, sizeof(a->fake_key), errmsg);
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "cannot derive the SCRAM answer key");
        node_access_free(a);
        return rv;
    }
    errmsg[0] = '\0';
    *out = a;
    return 0;
}

void node_access_free(struct node_access *a)
{
    if (a == NULL) {
        return;
    }
    for (unsigned i = 0; i < ACCESS__BUCKETS; i++) {
        while (a->buckets[i] != NULL) {
            struct rate_bucket *b = a->buckets[i];
            a->buckets[i] = b->next;
            tern_free(b);
        }
    }
    tern_free(a->fails);
    tern_free(a->fail_heads);
    auth_wipe(a->fake_key, sizeof(a->fake_key));
    tern_free(a);
}

/* ---- Login failures per source address ----------------------------------
 */

static uint32_t fail_slot(const struct node_access *a, uint32_t ip)
{
    return tern_checksum32(&ip, sizeof(ip)) % a->fail_cap;
}

/* The entry of ip, or NULL. */
static struct fail_entry *fail_find(struct node_access *a, uint32_t ip)
{
    uint32_t i = a->fail_heads[fail_slot(a, ip)];
    while (i != 0) {
        struct fail_entry *f = &a->fails[i - 1];
        if (f->ip == ip) {
            return f;
        }
        i = f->next;
    }
    return NULL;
}

/* Take f (used) out of its hash chain and mark it free. */
static void fail_unlink(struct node_access *a, struct fail_entry *f)
{
    uint32_t *link = &a->fail_heads[fail_slot(a, f->ip)];
    uint32_t idx = (uint32_t)(f - a->fails) + 1;
    while (*link != 0 && *link != idx) {
        link = &a->fails[*link - 1].next;
    }
    if (*link == idx) {
        *link = f->next;
    }
    memset(f, 0, sizeof(*f));
    f->next = a->fail_free;
    a->fail_free = idx;
    a->fail_used--;
}

/* A free entry for ip, linked into its chain: an unused one, or the one
 * with the oldest window (forgotten). */
static struct fail_entry *fail_take(struct node_access *a, uint32_t ip)
{
    struct fail_entry *f;
    uint32_t slot;
    if (a->fail_free == 0) {
        f = &a->fails[0];
        for (unsigned i = 1; i < a->fail_cap; i++) {
            if (a->fails[i].start_ms < f->start_ms) {
                f = &a->fails[i];
            }
        }
        fail_unlink(a, f);
    }
    f = &a->fails[a->fail_free - 1];
    a->fail_free = f->next;
    TERN_ASSERT(!f->used);
    slot = fail_slot(a, ip);
    f->ip = ip;
    f->used = true;
    f->next = a->fail_heads[slot];
    a->fail_heads[slot] = (uint32_t)(f - a->fails) + 1;
    a->fail_used++;
    return f;
}

int node_access_login_allowed(struct node_access *a,
                              uint32_t ip,
                              uint64_t now_ms,
                              char *errmsg)
{
    unsigned cap = a->cfg->auth_failures_per_minute;
    struct fail_entry *f;
    uint64_t wait_s;

    if (cap == 0 || (f = fail_find(a, ip)) == NULL || f->count < cap) {
        return 0;
    }
    if (now_ms >= f->start_ms + ACCESS__FAIL_WINDOW_MS) {
        fail_unlink(a, f); /* its window is over */
        return 0;
    }
    wait_s = (f->start_ms + ACCESS__FAIL_WINDOW_MS - now_ms + 999) / 1000;
    tern_errmsg_printf(errmsg,
                       "too many failed logins from this address (%u in "
                       "a minute, auth_failures_per_minute); retry in %llu s",
                       f->count, (unsigned long long)wait_s);
    return TERN_ETHROTTLED;
}

void node_access_login_failed(struct node_access *a,
                              uint32_t ip,
                              uint64_t now_ms)
{
    struct fail_entry *f = fail_find(a, ip);
    if (f == NULL) {
        f = fail_take(a, ip);
        f->count = 0;
        f->start_ms = now_ms;
    } else if (now_ms >= f->start_ms + ACCESS__FAIL_WINDOW_MS) {
        f->count = 0;
        f->start_ms = now_ms;
    }
    if (f->count < UINT32_MAX) {
        f->count++;
    }
}

unsigned node_access_login_sources(const struct node_access *a)
{
    return a->fail_used;
}

bool node_access_required(const struct node_access *a)
{
    return a->required;
}

void node_principal_clear(struct node_principal *p)
{
    auth_scram_server_free(p->scram);
    memset(p, 0, sizeof(*p));
}

static const char *principal_ns(const struct node_principal *p)
{
    return p->ns[0] != '\0' ? p->ns : TERN_NS_DEFAULT;
}

/* ---- The exchange --------------------------------------------------------
 */

/* Copy s[0..len) into dst (cap bytes) with a NUL; false if it does not
 * fit. */
static bool copy_str(char *dst, size_t cap, const char *s, size_t len)
{
    if (len >= cap) {
        return false;
    }
    if (len > 0) {
        memcpy(dst, s, len);
    }
    dst[len] = '\0';
    return true;
}

static bool str_is(const char *s, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(s, want, len) == 0;
}

static int auth_fail(struct node_principal *p, char *errmsg, const char *why)
{
    auth_scram_server_free(p->scram);
    p->scram = NULL;
    if (why != NULL) {
        tern_errmsg_printf(errmsg, "authentication failed: %s", why);
    }
    return TERN_EAUTH;
}

static int auth_start_ns(struct node_principal *p,
                         struct idx_env *e,
                         const struct proto_request *r,
                         char *errmsg)
{
    char ns[TERN_NS_NAME_MAX + 1];
    struct idx_namespace_info info;
    if (r->ns_len == 0) {
        p->ns[0] = '\0';
        return 0;
    }
    if (!copy_str(ns, sizeof(ns), r->ns, r->ns_len)) {
        return auth_fail(p, errmsg, "namespace name too long");
    }
    if (strcmp(ns, TERN_NS_DEFAULT) != 0 &&
        idx_namespace_get(e, ns, &info) != 0) {
        tern_errmsg_printf(errmsg,
                           "authentication failed: namespace %s does not "
                           "exist",
                           ns);
        return auth_fail(p, errmsg, NULL);
    }
    (void)snprintf(p->ns, sizeof(p->ns), "%s",
                   strcmp(ns, TERN_NS_DEFAULT) == 0 ? "" : ns);
    return 0;
}

static int auth_external(struct node_principal *p,
                         struct idx_env *e,
                         const struct proto_request *r,
                         const char *cert_cn,
                         char *errmsg)
{
    struct idx_user_info u;
    size_t cn_len = cert_cn != NULL ? strlen(cert_cn) : 0;
    if (cn_len == 0) {
        return auth_fail(p, errmsg,
                         "EXTERNAL needs a verified TLS client certificate");
    }
    if (r->auth_data_len > 0 &&
        !str_is((const char *)r->auth_data, r->auth_data_len, cert_cn)) {
        return auth_fail(p, errmsg,
                         "the user named is not the certificate's CN");
    }
    if (cn_len > IDX_USER_NAME_MAX || !tern_name_valid(cert_cn, cn_len) ||
        idx_user_get(e, cert_cn, &u) != 0 || (u.flags & IDX_USER_CERT) == 0) {
        auth_wipe(&u, sizeof(u));
        return auth_fail(p, errmsg,
                         "the certificate's CN is not a user allowed to log "
                         "in by certificate");
    }
    (void)snprintf(p->user, sizeof(p->user), "%s", cert_cn);
    p->created_index = u.created_index;
    p->state = NODE_PRINCIPAL_DONE;
    auth_wipe(&u, sizeof(u));
    return 0;
}

static int auth_scram_start(struct node_access *a,
                            struct node_principal *p,
                            struct idx_env *e,
                            const struct proto_request *r,
                            const void **reply,
                            size_t *reply_len,
                            char *errmsg)
{
    struct auth_scram_cred cred;
    struct idx_user_info u;
    const struct auth_scram_cred *use = NULL;
    const char *user = NULL, *msg = NULL;
    char m[TERN_ERRMSG_SIZE];
    size_t n = 0;
    int rv;

    rv = auth_scram_server_new(a->fake_key, 0, &p->scram, m);
    if (rv != 0) {
        return auth_fail(p, errmsg, m);
    }
    rv = auth_scram_server_start(p->scram, (const char *)r->auth_data,
                                 r->auth_data_len, &user, NULL, NULL, m);
    if (rv != 0) {
        return auth_fail(p, errmsg, m);
    }
    memset(&u, 0, sizeof(u));
    if (strlen(user) <= IDX_USER_NAME_MAX &&
        tern_name_valid(user, strlen(user)) && idx_user_get(e, user, &u) == 0 &&
        u.cred_len > 0 &&
        auth_scram_cred_decode(u.cred, u.cred_len, &cred, m) == 0) {
        use = &cred;
        (void)snprintf(p->user, sizeof(p->user), "%s", user);
        p->created_index = u.created_index;
    } else {
        /* Unknown: the exchange goes on with derived answers and fails at
         * the proof; no user is recorded. */
        p->user[0] = '\0';
    }
    rv = auth_scram_server_first(p->scram, use, &msg, &n, m);
    auth_wipe(&cred, sizeof(cred));
    auth_wipe(&u, sizeof(u));
    if (rv != 0) {
        return auth_fail(p, errmsg, m);
    }
    p->state = NODE_PRINCIPAL_SCRAM;
    *reply = msg;
    *reply_len = n;
    return 0;
}

static int auth_scram_continue(struct node_principal *p,
                               const struct proto_request *r,
                               const void **reply,
                               size_t *reply_len,
                               char *errmsg)
{
    const char *msg = NULL;
    char m[TERN_ERRMSG_SIZE];
    size_t n = 0;
    int rv = auth_scram_server_final(p->scram, (const char *)r->auth_data,
                                     r->auth_data_len, &msg, &n, m);
    if (rv != 0 || p->user[0] == '\0') {
        p->user[0] = '\0';
        p->state = NODE_PRINCIPAL_NONE;
        return auth_fail(p, errmsg, "unknown user or wrong password");
    }
    p->state = NODE_PRINCIPAL_DONE;
    *reply = msg; /* borrowed from p->scram, freed at clear */
    *reply_len = n;
    return 0;
}

int node_access_auth(struct node_access *a,
                     struct node_principal *p,
                     struct idx_env *e,
                     const struct proto_request *r,
                     const char *cert_cn,
                     const void **reply,
                     size_t *reply_len,
                     char *errmsg)
{
    int rv;
    *reply = "";
    *reply_len = 0;
    if (e == NULL) {
        return auth_fail(p, errmsg, "the node has no index (stopping)");
    }
    if (r->op == PROTO_OP_AUTH_CONTINUE) {
        if (p->state != NODE_PRINCIPAL_SCRAM) {
            return auth_fail(p, errmsg, "AUTH_CONTINUE without AUTH_START");
        }
        return auth_scram_continue(p, r, reply, reply_len, errmsg);
    }
    if (p->state != NODE_PRINCIPAL_NONE) {
        return auth_fail(p, errmsg, "the connection authenticated already");
    }
    rv = auth_start_ns(p, e, r, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (str_is(r->mechanism, r->mechanism_len, ACCESS__MECH_SCRAM)) {
        return auth_scram_start(a, p, e, r, reply, reply_len, errmsg);
    }
    if (str_is(r->mechanism, r->mechanism_len, ACCESS__MECH_EXTERNAL)) {
        return auth_external(p, e, r, cert_cn, errmsg);
    }
    return auth_fail(p, errmsg,
                     "unknown mechanism (SCRAM-SHA-256 or EXTERNAL)");
}

/* ---- Checks --------------------------------------------------------------
 */

/* p's user as it authenticated, still in the table: flags (OUT). */
static bool user_current(const struct node_principal *p,
                         struct idx_env *e,
                         uint32_t *flags)
{
    struct idx_user_info u;
    bool ok = idx_user_get(e, p->user, &u) == 0 &&
              u.created_index == p->created_index;
    *flags = ok ? u.flags : 0;
    auth_wipe(&u, sizeof(u));
    return ok;
}

static const char *perm_name(uint32_t want)
{
    switch (want) {
    case IDX_PERM_PRODUCE:
        return "produce";
    case IDX_PERM_CONSUME:
        return "consume";
    case IDX_PERM_MANAGE:
        return "manage";
    default:
        return "admin";
    }
}

static int deny(const struct node_principal *p,
                uint32_t want,
                const char *queue,
                size_t queue_len,
                char *errmsg)
{
    if (queue != NULL) {
        tern_errmsg_printf(errmsg,
                           "user %s has no %s permission on queue %.*s in "
                           "namespace %s",
                           p->user, perm_name(want), (int)queue_len, queue,
                           principal_ns(p));
    } else {
        tern_errmsg_printf(errmsg,
                           "user %s is not a cluster administrator (needed "
                           "for this request)",
                           p->user);
    }
    return TERN_EDENIED;
}

static int check_queue(const struct node_principal *p,
                       struct idx_env *e,
                       const struct proto_request *r,
                       uint32_t want,
                       char *errmsg)
{
    char queue[TERN_NAME_MAX + 1];
    bool allowed = false;
    if (!copy_str(queue, sizeof(queue), r->queue, r->queue_len)) {
        tern_errmsg_printf(errmsg, "queue name too long");
        return TERN_EBADNAME;
    }
    if (idx_acl_allows(e, p->user, principal_ns(p), queue, want, &allowed) !=
            0 ||
        !allowed) {
        return deny(p, want, r->queue, r->queue_len, errmsg);
    }
    return 0;
}

static int check_cred(const struct proto_request *r, char *errmsg)
{
    struct auth_scram_cred cred;
    char m[TERN_ERRMSG_SIZE];
    int rv;
    if (r->op != PROTO_OP_USER_SET || r->cred_len == 0) {
        return 0;
    }
    rv = auth_scram_cred_decode(r->cred, r->cred_len, &cred, m);
    auth_wipe(&cred, sizeof(cred));
    if (rv != 0) {
        tern_errmsg_printf(errmsg,
                           "the credential is not a SCRAM-SHA-256 "
                           "credential: %s",
                           m);
        return TERN_EINVAL;
    }
    return 0;
}

int node_access_check(struct node_access *a,
                      const struct node_principal *p,
                      struct idx_env *e,
                      const struct proto_request *r,
                      char *errmsg)
{
    uint32_t flags = 0;
    int rv = check_cred(r, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (r->op == PROTO_OP_STATUS || r->op == PROTO_OP_HELLO) {
        return 0;
    }
    if (p->state != NODE_PRINCIPAL_DONE) {
        if (!a->required) {
            return 0; /* client_auth off: the anonymous user of before */
        }
        tern_errmsg_printf(errmsg,
                           "authenticate first (AUTH_START): "
                           "this node requires client "
                           "authentication");
        return TERN_EAUTH;
    }
    if (e == NULL) {
        tern_errmsg_printf(errmsg, "the node has no index (stopping)");
        return TERN_ESHUTDOWN;
    }
    if (!user_current(p, e, &flags)) {
        tern_errmsg_printf(errmsg,
                           "user %s was deleted or replaced since this "
                           "connection authenticated",
                           p->user);
        return TERN_EAUTH;
    }
    if ((flags & IDX_USER_ADMIN) != 0) {
        return 0;
    }
    switch (r->op) {
    case PROTO_OP_PRODUCE:
    case PROTO_OP_PRODUCE_DELAYED:
        return check_queue(p, e, r, IDX_PERM_PRODUCE, errmsg);
    case PROTO_OP_FETCH:
    case PROTO_OP_GROUP_FETCH:
    case PROTO_OP_GROUP_COMMIT:
    case PROTO_OP_MESSAGE_GET:
    case PROTO_OP_MESSAGE_TRACE:
    case PROTO_OP_RECEIVE:
    case PROTO_OP_SETTLE:
    case PROTO_OP_CLAIM:
        return check_queue(p, e, r, IDX_PERM_CONSUME, errmsg);
    case PROTO_OP_SHARED_CONFIG:
        return check_queue(p, e, r, IDX_PERM_MANAGE, errmsg);
    case PROTO_OP_GROUP_STATUS: {
        /* Consumers and operators alike: consume, or else manage. */
        char scratch[TERN_ERRMSG_SIZE];
        return check_queue(p, e, r, IDX_PERM_CONSUME, scratch) == 0
                   ? 0
                   : check_queue(p, e, r, IDX_PERM_MANAGE, errmsg);
    }
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_DELETE:
        return check_queue(p, e, r, IDX_PERM_MANAGE, errmsg);
    case PROTO_OP_QUEUE_UPDATE:
        return check_queue(p, e, r, IDX_PERM_MANAGE, errmsg);
    case PROTO_OP_OFFSET_FOR_TIME:
        return check_queue(p, e, r, IDX_PERM_CONSUME, errmsg);
    case PROTO_OP_QUEUE_INFO:
        /* consume or manage */
        if (check_queue(p, e, r, IDX_PERM_CONSUME, errmsg) == 0) {
            return 0;
        }
        return check_queue(p, e, r, IDX_PERM_MANAGE, errmsg);
    case PROTO_OP_QUEUE_LIST:
    case PROTO_OP_PRODUCER_INIT:
        return 0;
    case PROTO_OP_STATS:
        if ((r->flags & PROTO_STATS_RESET) == 0) {
            return 0;
        }
        return deny(p, IDX_PERM_ADMIN, NULL, 0, errmsg);
    default: /* users, grants, namespaces */
        return deny(p, IDX_PERM_ADMIN, NULL, 0, errmsg);
    }
}

int node_access_qualify(const struct node_principal *p,
                        const char *queue,
                        size_t len,
                        char *out,
                        char *errmsg)
{
    char name[TERN_NAME_MAX + 1];
    int n;
    if (!copy_str(name, sizeof(name), queue, len) ||
        (n = tern_qname_join(out, TERN_NAME_MAX + 1, p->ns, name)) < 0) {
        tern_errmsg_printf(errmsg,
                           "queue name %.*s is too long for namespace %s "
                           "(namespace, '%%' and name fit in %u bytes)",
                           (int)TERN_MIN(len, (size_t)64), queue,
                           principal_ns(p), TERN_NAME_MAX);
        return TERN_EBADNAME;
    }
    return 0;
}

/* ---- Queue lists ---------------------------------------------------------
 */

struct grant_copy
{
    char ns[TERN_NS_NAME_MAX + 1];
    char pattern[TERN_NAME_MAX + 1];
    uint32_t perms;
};

struct node_access_list
{
    const struct node_principal *p;
    bool all; /* anonymous or cluster admin: every queue */
    char prefix[TERN_NS_NAME_MAX + 2]; /* "ns%" ("" in default) */
    size_t prefix_len;
    struct grant_copy *g;
    struct idx_acl *acl; /* views of g for idx_acl_eval */
    size_t n, cap;
    int err;
};

static int grant_cb(void *arg, const struct idx_acl *a)
{
    struct node_access_list *l = arg;
    struct grant_copy *g;
    if (strcmp(a->ns, principal_ns(l->p)) != 0) {
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap == 0 ? 16 : l->cap * 2;
        if (cap > ACCESS__MAX_GRANTS) {
            l->err = TERN_ELIMIT;
            return 1;
        }
        g = tern_realloc(l->g, cap * sizeof(*g));
        if (g == NULL) {
            l->err = -ENOMEM;
            return 1;
        }
        l->g = g;
        l->cap = cap;
    }
    g = &l->g[l->n++];
    (void)snprintf(g->ns, sizeof(g->ns), "%s", a->ns);
    (void)snprintf(g->pattern, sizeof(g->pattern), "%s", a->pattern);
    g->perms = a->perms;
    return 0;
}

/* p's grants in its namespace, as idx_acl records for idx_acl_eval. */
static int load_grants(struct node_access_list *l, struct idx_env *e)
{
    int rv = idx_acl_list(e, l->p->user, grant_cb, l);
    if (rv == 0) {
        rv = l->err;
    }
    if (rv == 0 && l->n > 0) {
        l->acl = tern_calloc(l->n, sizeof(*l->acl));
        if (l->acl == NULL) {
            return -ENOMEM;
        }
        for (size_t i = 0; i < l->n; i++) {
            l->acl[i].user = l->p->user;
            l->acl[i].ns = l->g[i].ns;
            l->acl[i].pattern = l->g[i].pattern;
            l->acl[i].perms = l->g[i].perms;
        }
    }
    return rv;
}

int node_access_list_begin(struct node_access *a,
                           const struct node_principal *p,
                           struct idx_env *e,
                           const char *after,
                           size_t len,
                           char *out,
                           struct node_access_list **lp)
{
    struct node_access_list *l = tern_calloc(1, sizeof(*l));
    uint32_t flags = 0;
    char m[TERN_ERRMSG_SIZE];
    int rv = 0;

    (void)a;
    if (l == NULL) {
        return -ENOMEM;
    }
    l->p = p;
    if (p->ns[0] != '\0') {
        l->prefix_len = (size_t)snprintf(l->prefix, sizeof(l->prefix), "%s%c",
                                         p->ns, TERN_NS_SEP);
    }
    if (len > 0) {
        rv = node_access_qualify(p, after, len, out, m);
    } else {
        /* Every stored name of the namespace sorts after its prefix. */
        memcpy(out, l->prefix, l->prefix_len + 1);
    }
    if (rv == 0 && p->state != NODE_PRINCIPAL_DONE) {
        l->all = true; /* client_auth off: the anonymous user of before */
    } else if (rv == 0 && user_current(p, e, &flags)) {
        l->all = (flags & IDX_USER_ADMIN) != 0;
        if (!l->all) {
            rv = load_grants(l, e);
        }
    }
    if (rv != 0) {
        node_access_list_end(l);
        return rv;
    }
    *lp = l;
    return 0;
}

int node_access_list_show(struct node_access_list *l,
                          const char *stored,
                          const char **shown)
{
    const char *sep = strchr(stored, TERN_NS_SEP);
    if (l->prefix_len > 0) {
        if (strncmp(stored, l->prefix, l->prefix_len) != 0) {
            return -1; /* past the namespace's contiguous range */
        }
        *shown = stored + l->prefix_len;
    } else {
        if (sep != NULL) {
            return 0; /* another namespace's queue, among default's */
        }
        *shown = stored;
    }
    if (l->all) {
        return 1;
    }
    return idx_acl_eval(l->acl, l->n, false, principal_ns(l->p), *shown) != 0
               ? 1
               : 0;
}

void node_access_list_end(struct node_access_list *l)
{
    if (l == NULL) {
        return;
    }
    tern_free(l->acl);
    tern_free(l->g);
    tern_free(l);
}

/* ---- Producer ids and rates ----------------------------------------------
 */

int node_access_producer(struct node_access *a,
                         struct node_principal *p,
                         struct idx_env *e,
                         uint64_t pid,
                         char *errmsg)
{
    char owner[TERN_NAME_MAX + 1];
    bool owned = false;
    uint64_t block = pid >> 32;
    int rv;

    if (p->pid_block != 0 && p->pid_block == block) {
        return 0;
    }
    if (e == NULL) {
        tern_errmsg_printf(errmsg, "the node has no index (stopping)");
        return TERN_ESHUTDOWN;
    }
    rv = idx_producer_owner(e, pid, owner, &owned);
    if (rv == TERN_ENOTFOUND) {
        if (p->state != NODE_PRINCIPAL_DONE && !a->required) {
            return 0; /* an id a client of before chose itself */
        }
        tern_errmsg_printf(errmsg,
                           "producer id %llu was not issued by the cluster "
                           "(ask for one with PRODUCER_INIT)",
                           (unsigned long long)pid);
        return TERN_EDENIED;
    }
    if (rv != 0 || !owned || strcmp(owner, p->user) != 0) {
        tern_errmsg_printf(errmsg, "producer id %llu belongs to another user",
                           (unsigned long long)pid);
        return TERN_EDENIED;
    }
    /* The owner's created_index was matched by idx_producer_owner against
     * the live user; p is that user unless it was replaced since, which
     * node_access_check refuses before we get here. */
    p->pid_block = block;
    return 0;
}

static unsigned bucket_slot(const char *ns)
{
    return tern_checksum32(ns, strlen(ns)) % ACCESS__BUCKETS;
}

/* Unlink and free every bucket for which drop(a, b, arg) says so. */
static void buckets_drop_if(struct node_access *a,
                            bool (*drop)(const struct rate_bucket *b,
                                         void *arg),
                            void *arg)
{
    for (unsigned i = 0; i < ACCESS__BUCKETS; i++) {
        struct rate_bucket **link = &a->buckets[i];
        while (*link != NULL) {
            struct rate_bucket *b = *link;
            if (drop(b, arg)) {
                *link = b->next;
                tern_free(b);
                a->n_buckets--;
            } else {
                link = &b->next;
            }
        }
    }
}

/* A bucket whose namespace is gone, was re-created, or has no rate. */
static bool bucket_stale(const struct rate_bucket *b, void *arg)
{
    struct idx_namespace_info info;
    if (idx_namespace_get(arg, b->ns, &info) != 0) {
        return true;
    }
    return info.created_index != b->created_index ||
           info.quota.produce_bytes_per_s == 0;
}

static bool bucket_is(const struct rate_bucket *b, void *arg)
{
    return b == arg;
}

/* The least recently charged bucket (there is one: n_buckets > 0). */
static struct rate_bucket *bucket_lru(struct node_access *a)
{
    struct rate_bucket *lru = NULL;
    for (unsigned i = 0; i < ACCESS__BUCKETS; i++) {
        for (struct rate_bucket *b = a->buckets[i]; b != NULL; b = b->next) {
            if (lru == NULL || b->used_ms < lru->used_ms) {
                lru = b;
            }
        }
    }
    return lru;
}

/* The bucket of ns, or NULL. */
static struct rate_bucket *bucket_find(struct node_access *a, const char *ns)
{
    for (struct rate_bucket *b = a->buckets[bucket_slot(ns)]; b != NULL;
         b = b->next) {
        if (strcmp(b->ns, ns) == 0) {
            return b;
        }
    }
    return NULL;
}

unsigned node_access_rate_buckets(const struct node_access *a)
{
    return a->n_buckets;
}

int node_access_rate(struct node_access *a,
                     const struct node_principal *p,
                     struct idx_env *e,
                     uint64_t bytes,
                     uint64_t now_ms,
                     char *errmsg)
{
    const char *ns = principal_ns(p);
    struct idx_namespace_info info;
    struct rate_bucket *b;
    unsigned slot = bucket_slot(ns);
    uint64_t gen;
    uint64_t rate;

    if (e == NULL) {
        return 0;
    }
    gen = idx_security_gen(e);
    if (gen != a->bucket_gen) {
        /* Namespaces may have been deleted, re-created or changed. */
        buckets_drop_if(a, bucket_stale, e);
        a->bucket_gen = gen;
    }
    b = bucket_find(a, ns);
    if (idx_namespace_get(e, ns, &info) != 0 ||
        info.quota.produce_bytes_per_s == 0) {
        if (b != NULL) {
            buckets_drop_if(a, bucket_is, b);
        }
        return 0;
    }
    rate = TERN_MIN(info.quota.produce_bytes_per_s, ACCESS__MAX_RATE);
    if (b == NULL) {
        if (a->n_buckets >= ACCESS__MAX_BUCKETS) {
            buckets_drop_if(a, bucket_is, bucket_lru(a));
        }
        b = tern_calloc(1, sizeof(*b));
        if (b == NULL) {
            return 0; /* no memory for a bucket: do not refuse for it */
        }
        (void)snprintf(b->ns, sizeof(b->ns), "%s", ns);
        b->next = a->buckets[slot];
        a->buckets[slot] = b;
        a->n_buckets++;
        b->rate = 0;
    }
    b->used_ms = now_ms;
    if (b->created_index != info.created_index) {
        b->created_index = info.created_index;
        b->rate = 0; /* another namespace of the same name: start afresh */
    }
    if (b->rate != rate) {
        b->rate = rate;
        b->tokens = (int64_t)rate;
        b->last_ms = now_ms;
    }
    if (now_ms >= b->last_ms + 1000u) {
        b->tokens = (int64_t)rate;
        b->last_ms = now_ms;
    } else if (now_ms > b->last_ms) {
        uint64_t add = (now_ms - b->last_ms) * rate / 1000u;
        b->tokens = TERN_MIN(b->tokens + (int64_t)add, (int64_t)rate);
        /* Advance by the time the tokens added stand for (keeps the
         * remainder of the division for the next call). */
        b->last_ms += add * 1000u / rate;
    }
    if (b->tokens <= 0) {
        uint64_t wait = ((uint64_t)(-b->tokens) * 1000u) / rate + 1;
        tern_errmsg_printf(errmsg,
                           "namespace %s is over its produce rate (%llu "
                           "bytes/s); retry in %llu ms",
                           ns, (unsigned long long)rate,
                           (unsigned long long)wait);
        return TERN_ETHROTTLED;
    }
    b->tokens -= (int64_t)TERN_MIN(bytes, ACCESS__MAX_RATE);
    return 0;
}
