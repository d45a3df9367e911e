/* Unit tests of the security metadata of index/ (docs/AUTH.md): the
 * USER_*, ACL_*, NAMESPACE_* and PRODUCER_INIT command codecs, applying
 * them into the users/acls/namespaces/producer_ids tables, the reads and
 * the grant evaluator, and that the tables survive a rebuild from the log
 * (idx_open) and a snapshot install (bulk copy + idx_restore). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "cmd.h"
#include "index_helpers.h"

TestSuite(index_security, .init = th_dirs_init, .fini = th_dirs_fini);

/* The producer id PRODUCER_INIT answers for block n. */
#define PID(n) ((uint64_t)(n) << 32)

static const uint8_t cred_a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
static const uint8_t cred_b[] = {0xaa, 0xbb, 0xcc};

/* ---- helpers ------------------------------------------------------------- */

/* Apply one single-command entry built by the caller into w; returns the
 * command's result. */
static struct idx_result apply1(struct idx_env *e,
                                uint64_t index,
                                struct tern_wbuf *w)
{
    struct idx_result r[1];
    memset(r, 0, sizeof r);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(idx_flush(e), 0);
    return r[0];
}

static int user_set(struct idx_env *e,
                    uint64_t index,
                    const char *name,
                    uint32_t flags,
                    const uint8_t *cred,
                    size_t n)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_user_set(&w, name, flags, cred, n);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static int user_delete(struct idx_env *e, uint64_t index, const char *name)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_user_delete(&w, name);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static int acl_set(struct idx_env *e,
                   uint64_t index,
                   const char *user,
                   const char *ns,
                   const char *pattern,
                   uint32_t perms)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_acl_set(&w, user, ns, pattern, perms);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static int acl_delete(struct idx_env *e,
                      uint64_t index,
                      const char *user,
                      const char *ns,
                      const char *pattern)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_acl_delete(&w, user, ns, pattern);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static int ns_set(struct idx_env *e,
                  uint64_t index,
                  const char *name,
                  uint64_t max_queues)
{
    struct tern_wbuf w;
    struct idx_quota q = {max_queues, max_queues * 1000, max_queues * 7};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_namespace_set(&w, name, &q);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static int ns_delete(struct idx_env *e, uint64_t index, const char *name)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_namespace_delete(&w, name);
    int st = apply1(e, index, &w).status;
    tern_wbuf_free(&w);
    return st;
}

static struct idx_result producer_init(struct idx_env *e,
                                       uint64_t index,
                                       const char *owner)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_producer_init(&w, owner);
    struct idx_result r = apply1(e, index, &w);
    tern_wbuf_free(&w);
    return r;
}

/* A text dump of every security table, to compare two envs. */
struct dump
{
    char buf[8192];
    size_t len;
};

static void dump_add(struct dump *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void dump_add(struct dump *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->buf + d->len, sizeof d->buf - d->len, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof d->buf - d->len);
    d->len += (size_t)n;
}

static int dump_user(void *arg, const struct idx_user_info *u)
{
    struct dump *d = arg;
    dump_add(d, "user %s %u %llu %u:", u->name, u->flags,
             (unsigned long long)u->created_index, u->cred_len);
    for (uint32_t i = 0; i < u->cred_len; i++) {
        dump_add(d, "%02x", u->cred[i]);
    }
    dump_add(d, "\n");
    return 0;
}

static int dump_acl(void *arg, const struct idx_acl *a)
{
    dump_add(arg, "acl %s %s %s %u\n", a->user, a->ns, a->pattern, a->perms);
    return 0;
}

static int dump_ns(void *arg, const struct idx_namespace_info *n)
{
    dump_add(arg, "ns %s %llu %llu %llu %llu\n", n->name,
             (unsigned long long)n->created_index,
             (unsigned long long)n->quota.max_queues,
             (unsigned long long)n->quota.max_bytes,
             (unsigned long long)n->quota.produce_bytes_per_s);
    return 0;
}

static void dump_env(struct idx_env *e, struct dump *d)
{
    memset(d, 0, sizeof *d);
    cr_assert_eq(idx_user_list(e, dump_user, d), 0);
    cr_assert_eq(idx_acl_list(e, NULL, dump_acl, d), 0);
    cr_assert_eq(idx_namespace_list(e, dump_ns, d), 0);
    dump_add(d, "next_pid %llu\n", (unsigned long long)idx_next_producer_id(e));
    for (uint64_t blk = 1; blk < idx_next_producer_id(e); blk++) {
        char owner[TERN_NAME_MAX + 1];
        bool owned;
        cr_assert_eq(idx_producer_owner(e, PID(blk), owner, &owned), 0);
        dump_add(d, "pid %llu %s %d\n", (unsigned long long)blk, owner, owned);
    }
}

/* The workload of the rebuild and snapshot tests: entries 1..11. */
static void apply_workload(struct idx_env *e)
{
    cr_assert_eq(user_set(e, 1, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(user_set(e, 2, "root", IDX_USER_ADMIN, cred_b, sizeof cred_b),
                 0);
    cr_assert_eq(ns_set(e, 3, "team1", 10), 0);
    cr_assert_eq(acl_set(e, 4, "alice", "team1", "orders*",
                         IDX_PERM_PRODUCE | IDX_PERM_CONSUME),
                 0);
    cr_assert_eq(acl_set(e, 5, "alice", "default", "*", IDX_PERM_CONSUME), 0);
    cr_assert_eq(producer_init(e, 6, "alice").base_offset, PID(1));
    cr_assert_eq(producer_init(e, 7, NULL).base_offset, PID(2));
    cr_assert_eq(user_set(e, 8, "bob", IDX_USER_CERT, NULL, 0), 0);
    cr_assert_eq(producer_init(e, 9, "bob").base_offset, PID(3));
    cr_assert_eq(user_delete(e, 10, "bob"), 0);
    cr_assert_eq(user_set(e, 11, "bob", IDX_USER_CERT, NULL, 0), 0);
    th_create(e, 12, "orders-eu");
}

/* ---- codec --------------------------------------------------------------- */

Test(index_security, codec_round_trip)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx_quota q = {1, 2, 3};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 42);
    idx_cmd_user_set(&w, "alice", IDX_USER_ADMIN, cred_a, sizeof cred_a);
    idx_cmd_user_delete(&w, "bob");
    idx_cmd_acl_set(&w, "alice", "ns1", "q*", IDX_PERM_MANAGE);
    idx_cmd_acl_delete(&w, "alice", "ns1", "*");
    idx_cmd_namespace_set(&w, "ns1", &q);
    idx_cmd_namespace_delete(&w, "ns2");
    idx_cmd_producer_init(&w, "alice");
    idx_cmd_producer_init(&w, "");
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_USER_SET);
    cr_assert_eq(c.queue_len, 5);
    cr_assert_eq(memcmp(c.queue, "alice", 5), 0);
    cr_assert_eq(c.flags, IDX_USER_ADMIN);
    cr_assert_eq(c.cred_len, sizeof cred_a);
    cr_assert_eq(memcmp(c.cred, cred_a, sizeof cred_a), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_USER_DELETE);
    cr_assert_eq(memcmp(c.queue, "bob", 3), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_ACL_SET);
    cr_assert_eq(c.ns_len, 3);
    cr_assert_eq(memcmp(c.ns, "ns1", 3), 0);
    cr_assert_eq(c.pattern_len, 2);
    cr_assert_eq(memcmp(c.pattern, "q*", 2), 0);
    cr_assert_eq(c.flags, IDX_PERM_MANAGE);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_ACL_DELETE);
    cr_assert_eq(c.pattern_len, 1);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_NAMESPACE_SET);
    cr_assert_eq(c.quota.max_queues, 1);
    cr_assert_eq(c.quota.max_bytes, 2);
    cr_assert_eq(c.quota.produce_bytes_per_s, 3);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_NAMESPACE_DELETE);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_PRODUCER_INIT);
    cr_assert_eq(c.queue_len, 5);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_PRODUCER_INIT);
    cr_assert_eq(c.queue_len, 0);

    cr_assert_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
}

static int build_err(void (*add)(struct tern_wbuf *w))
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    add(&w);
    int rc = idx_cmd_end(&w);
    tern_wbuf_free(&w);
    return rc;
}

static void bad_flags(struct tern_wbuf *w)
{
    idx_cmd_user_set(w, "a", 0x4, cred_a, sizeof cred_a);
}
static void no_cred(struct tern_wbuf *w)
{
    idx_cmd_user_set(w, "a", IDX_USER_ADMIN, NULL, 0);
}
static void big_cred(struct tern_wbuf *w)
{
    static uint8_t big[IDX_CRED_MAX + 1];
    idx_cmd_user_set(w, "a", 0, big, sizeof big);
}
static void long_user(struct tern_wbuf *w)
{
    char name[IDX_USER_NAME_MAX + 2];
    memset(name, 'u', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    idx_cmd_user_delete(w, name);
}
static void long_ns(struct tern_wbuf *w)
{
    char name[IDX_NS_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    idx_cmd_namespace_delete(w, name);
}
static void bad_pattern(struct tern_wbuf *w)
{
    idx_cmd_acl_set(w, "a", "n", "a*b", IDX_PERM_PRODUCE);
}
static void zero_perms(struct tern_wbuf *w)
{
    idx_cmd_acl_set(w, "a", "n", "*", 0);
}
static void extra_perms(struct tern_wbuf *w)
{
    idx_cmd_acl_set(w, "a", "n", "*", 0x10);
}
static void bad_owner(struct tern_wbuf *w)
{
    idx_cmd_producer_init(w, "a b");
}

Test(index_security, builder_rejects)
{
    cr_assert_eq(build_err(bad_flags), TERN_EINVAL);
    cr_assert_eq(build_err(no_cred), TERN_EINVAL);
    cr_assert_eq(build_err(big_cred), TERN_EINVAL);
    cr_assert_eq(build_err(long_user), TERN_EBADNAME);
    cr_assert_eq(build_err(long_ns), TERN_EBADNAME);
    cr_assert_eq(build_err(bad_pattern), TERN_EBADNAME);
    cr_assert_eq(build_err(zero_perms), TERN_EINVAL);
    cr_assert_eq(build_err(extra_perms), TERN_EINVAL);
    cr_assert_eq(build_err(bad_owner), TERN_EBADNAME);
}

/* Re-seal an entry whose body bytes were patched (count, length,
 * checksum stay consistent), then validate it. */
static int patched_validate(struct tern_wbuf *w, size_t at, uint8_t v)
{
    w->base[at] = v;
    tern_put_u32(w->base + 20, 0);
    w->err = 0;
    /* idx_cmd_end recomputes length and checksum over the patched bytes. */
    cr_assert_eq(idx_cmd_end(w), 0);
    return idx_cmd_validate(w->base, w->len);
}

Test(index_security, decoder_rejects)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    /* USER_SET: header 24, type 1, len 4, name_len 1, "a", flags u32. */
    idx_cmd_begin(&w, 1);
    idx_cmd_user_set(&w, "a", 0, cred_a, sizeof cred_a);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 2, 0x04), TERN_EMALFORMED);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 2, 0x00), 0);

    /* A cert flag cleared on a credential-less user. */
    idx_cmd_begin(&w, 1);
    idx_cmd_user_set(&w, "a", IDX_USER_CERT, NULL, 0);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 2, 0x00), TERN_EMALFORMED);

    /* ACL_SET: ..., "a" (2), "n" (2), pattern_len 1, "*", perms. */
    idx_cmd_begin(&w, 1);
    idx_cmd_acl_set(&w, "a", "n", "*", IDX_PERM_PRODUCE);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 4 + 1, '/'), TERN_EMALFORMED);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 4 + 1, '*'), 0);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 6, 0x00), TERN_EMALFORMED);
    cr_assert_eq(patched_validate(&w, 24 + 5 + 6, 0x10), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(index_security, patterns)
{
    cr_assert(idx_acl_pattern_valid("*", 1));
    cr_assert(idx_acl_pattern_valid("orders", 6));
    cr_assert(idx_acl_pattern_valid("orders.*", 8));
    cr_assert_not(idx_acl_pattern_valid("", 0));
    cr_assert_not(idx_acl_pattern_valid("**", 2));
    cr_assert_not(idx_acl_pattern_valid("a*b", 3));
    cr_assert_not(idx_acl_pattern_valid("a b*", 4));

    cr_assert(idx_acl_pattern_match("*", "anything"));
    cr_assert(idx_acl_pattern_match("*", NULL));
    cr_assert(idx_acl_pattern_match("ord*", "orders"));
    cr_assert(idx_acl_pattern_match("ord*", "ord"));
    cr_assert_not(idx_acl_pattern_match("ord*", "or"));
    cr_assert_not(idx_acl_pattern_match("ord*", NULL));
    cr_assert(idx_acl_pattern_match("orders", "orders"));
    cr_assert_not(idx_acl_pattern_match("orders", "orders2"));
}

Test(index_security, eval_union_and_admin)
{
    struct idx_acl g[] = {
        {"u", "ns1", "orders*", IDX_PERM_PRODUCE},
        {"u", "ns1", "orders-eu", IDX_PERM_CONSUME},
        {"u", "ns2", "*", IDX_PERM_ADMIN},
        {"u", "ns1", "*", IDX_PERM_MANAGE},
    };
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns1", "orders-eu"),
                 IDX_PERM_PRODUCE | IDX_PERM_CONSUME | IDX_PERM_MANAGE);
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns1", "orders-us"),
                 IDX_PERM_PRODUCE | IDX_PERM_MANAGE);
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns1", "logs"), IDX_PERM_MANAGE);
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns1", NULL), IDX_PERM_MANAGE);
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns2", "x"), IDX_PERM_ALL);
    cr_assert_eq(idx_acl_eval(g, 4, false, "ns3", "x"), 0);
    cr_assert_eq(idx_acl_eval(g, 0, true, "ns3", "x"), IDX_PERM_ALL);
    cr_assert_eq(idx_acl_eval(NULL, 0, false, "ns1", "x"), 0);
}

/* ---- apply and reads ----------------------------------------------------- */

Test(index_security, users)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_user_info u;
    cr_assert_eq(idx_user_get(e, "alice", &u), TERN_ENOTFOUND);
    cr_assert_eq(user_set(e, 1, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(idx_user_get(e, "alice", &u), 0);
    cr_assert_eq(u.flags, 0);
    cr_assert_eq(u.created_index, 1);
    cr_assert_eq(u.cred_len, sizeof cred_a);
    cr_assert_eq(memcmp(u.cred, cred_a, sizeof cred_a), 0);
    /* Replace: new flags and credential, same creation index. */
    cr_assert_eq(user_set(e, 2, "alice", IDX_USER_ADMIN | IDX_USER_CERT, cred_b,
                          sizeof cred_b),
                 0);
    cr_assert_eq(idx_user_get(e, "alice", &u), 0);
    cr_assert_eq(u.flags, IDX_USER_ADMIN | IDX_USER_CERT);
    cr_assert_eq(u.created_index, 1);
    cr_assert_eq(u.cred_len, sizeof cred_b);
    cr_assert_eq(user_delete(e, 3, "alice"), 0);
    cr_assert_eq(idx_user_get(e, "alice", &u), TERN_ENOTFOUND);
    cr_assert_eq(user_delete(e, 4, "alice"), TERN_ENOTFOUND);
    cr_assert_eq(idx_user_get(e, "bad name", &u), TERN_EBADNAME);
    idx_close(e);
}

Test(index_security, grants_need_user_and_namespace)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct dump d;
    cr_assert_eq(acl_set(e, 1, "alice", "default", "*", IDX_PERM_PRODUCE),
                 TERN_ENOTFOUND);
    cr_assert_eq(user_set(e, 2, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(acl_set(e, 3, "alice", "team1", "*", IDX_PERM_PRODUCE),
                 TERN_ENOTFOUND);
    cr_assert_eq(acl_set(e, 4, "alice", "default", "*", IDX_PERM_PRODUCE), 0);
    cr_assert_eq(ns_set(e, 5, "team1", 3), 0);
    cr_assert_eq(acl_set(e, 6, "alice", "team1", "q*", IDX_PERM_CONSUME), 0);
    /* Replacing a grant of the same triple. */
    cr_assert_eq(acl_set(e, 7, "alice", "team1", "q*", IDX_PERM_MANAGE), 0);
    dump_env(e, &d);
    cr_assert_str_eq(d.buf,
                     "user alice 0 2 10:0102030405060708090a\n"
                     "acl alice default * 1\n"
                     "acl alice team1 q* 4\n"
                     "ns default 0 0 0 0\n"
                     "ns team1 5 3 3000 21\n"
                     "next_pid 1\n");
    cr_assert_eq(acl_delete(e, 8, "alice", "team1", "q*"), 0);
    cr_assert_eq(acl_delete(e, 9, "alice", "team1", "q*"), TERN_ENOTFOUND);
    idx_close(e);
}

Test(index_security, deletes_cascade_to_grants)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct dump d;
    cr_assert_eq(user_set(e, 1, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(user_set(e, 2, "al", 0, cred_b, sizeof cred_b), 0);
    cr_assert_eq(ns_set(e, 3, "n1", 1), 0);
    cr_assert_eq(ns_set(e, 4, "n2", 2), 0);
    cr_assert_eq(acl_set(e, 5, "alice", "n1", "*", 1), 0);
    cr_assert_eq(acl_set(e, 6, "alice", "n2", "*", 2), 0);
    cr_assert_eq(acl_set(e, 7, "alice", "n2", "x", 4), 0);
    cr_assert_eq(acl_set(e, 8, "al", "n1", "*", 1), 0);
    cr_assert_eq(acl_set(e, 9, "al", "n2", "y*", 2), 0);
    /* "al" is a prefix of "alice": its delete must not touch alice's. */
    cr_assert_eq(user_delete(e, 10, "al"), 0);
    dump_env(e, &d);
    cr_assert_str_eq(d.buf,
                     "user alice 0 1 10:0102030405060708090a\n"
                     "acl alice n1 * 1\n"
                     "acl alice n2 * 2\n"
                     "acl alice n2 x 4\n"
                     "ns default 0 0 0 0\n"
                     "ns n1 3 1 1000 7\n"
                     "ns n2 4 2 2000 14\n"
                     "next_pid 1\n");
    cr_assert_eq(ns_delete(e, 11, "n2"), 0);
    cr_assert_eq(ns_delete(e, 12, "n2"), TERN_ENOTFOUND);
    cr_assert_eq(ns_delete(e, 13, "default"), TERN_EINVAL);
    dump_env(e, &d);
    cr_assert_str_eq(d.buf,
                     "user alice 0 1 10:0102030405060708090a\n"
                     "acl alice n1 * 1\n"
                     "ns default 0 0 0 0\n"
                     "ns n1 3 1 1000 7\n"
                     "next_pid 1\n");
    idx_close(e);
}

Test(index_security, default_namespace_quotas_settable)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_namespace_info ni;
    cr_assert_eq(idx_namespace_get(e, "default", &ni), 0);
    cr_assert_eq(ni.quota.max_queues, 0);
    cr_assert_eq(idx_namespace_get(e, "nope", &ni), TERN_ENOTFOUND);
    cr_assert_eq(ns_set(e, 1, "a", 1), 0);
    cr_assert_eq(ns_set(e, 2, "default", 9), 0);
    cr_assert_eq(ns_set(e, 3, "z", 2), 0);
    cr_assert_eq(idx_namespace_get(e, "default", &ni), 0);
    cr_assert_eq(ni.quota.max_queues, 9);
    cr_assert_eq(ni.created_index, 2);
    struct dump d;
    dump_env(e, &d);
    cr_assert_str_eq(d.buf,
                     "ns a 1 1 1000 7\n"
                     "ns default 2 9 9000 63\n"
                     "ns z 3 2 2000 14\n"
                     "next_pid 1\n");
    idx_close(e);
}

Test(index_security, producer_ids_and_owners)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    char owner[TERN_NAME_MAX + 1];
    bool owned;
    cr_assert_eq(idx_next_producer_id(e), 1);
    cr_assert_eq(producer_init(e, 1, "ghost").status, TERN_ENOTFOUND);
    cr_assert_eq(idx_next_producer_id(e), 1);
    cr_assert_eq(user_set(e, 2, "alice", 0, cred_a, sizeof cred_a), 0);
    struct idx_result r = producer_init(e, 3, "alice");
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.base_offset, PID(1));
    cr_assert_eq(idx_next_producer_id(e), 2);
    cr_assert_eq(producer_init(e, 4, "").base_offset, PID(2));
    /* Every id of a block belongs to its owner. */
    cr_assert_eq(idx_producer_owner(e, PID(1), owner, &owned), 0);
    cr_assert_str_eq(owner, "alice");
    cr_assert(owned);
    cr_assert_eq(idx_producer_owner(e, PID(1) | 7, owner, &owned), 0);
    cr_assert_str_eq(owner, "alice");
    cr_assert(owned);
    cr_assert_eq(idx_producer_owner(e, PID(1) | 0xffffffffu, owner, &owned), 0);
    cr_assert_str_eq(owner, "alice");
    cr_assert_eq(idx_producer_owner(e, PID(2) + 12345, owner, &owned), 0);
    cr_assert_str_eq(owner, "");
    cr_assert(owned);
    /* Ids below 2^32 (block 0) and blocks not issued yet. */
    cr_assert_eq(idx_producer_owner(e, 1, owner, &owned), TERN_ENOTFOUND);
    cr_assert_eq(idx_producer_owner(e, 0xffffffffu, owner, &owned),
                 TERN_ENOTFOUND);
    cr_assert_eq(idx_producer_owner(e, PID(3), owner, &owned), TERN_ENOTFOUND);
    /* A user deleted and created again does not inherit its blocks. */
    cr_assert_eq(user_delete(e, 5, "alice"), 0);
    cr_assert_eq(idx_producer_owner(e, PID(1) | 3, owner, &owned), 0);
    cr_assert_not(owned);
    cr_assert_eq(user_set(e, 6, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(idx_producer_owner(e, PID(1) | 3, owner, &owned), 0);
    cr_assert_str_eq(owner, "alice");
    cr_assert_not(owned);
    /* A replace (same incarnation) keeps them. */
    cr_assert_eq(producer_init(e, 7, "alice").base_offset, PID(3));
    cr_assert_eq(user_set(e, 8, "alice", 0, cred_b, sizeof cred_b), 0);
    cr_assert_eq(idx_producer_owner(e, PID(3) | 9, owner, &owned), 0);
    cr_assert(owned);
    idx_close(e);
}

Test(index_security, acl_allows_over_tables)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    bool ok;
    apply_workload(e);
    cr_assert_eq(idx_acl_allows(e, "alice", "team1", "orders-eu",
                                IDX_PERM_PRODUCE | IDX_PERM_CONSUME, &ok),
                 0);
    cr_assert(ok);
    cr_assert_eq(
        idx_acl_allows(e, "alice", "team1", "orders-eu", IDX_PERM_MANAGE, &ok),
        0);
    cr_assert_not(ok);
    cr_assert_eq(
        idx_acl_allows(e, "alice", "team1", "logs", IDX_PERM_PRODUCE, &ok), 0);
    cr_assert_not(ok);
    cr_assert_eq(
        idx_acl_allows(e, "alice", "default", "logs", IDX_PERM_CONSUME, &ok),
        0);
    cr_assert(ok);
    cr_assert_eq(
        idx_acl_allows(e, "alice", "default", NULL, IDX_PERM_CONSUME, &ok), 0);
    cr_assert(ok);
    cr_assert_eq(idx_acl_allows(e, "root", "anything", "x", IDX_PERM_ALL, &ok),
                 0);
    cr_assert(ok);
    cr_assert_eq(
        idx_acl_allows(e, "nobody", "default", "x", IDX_PERM_PRODUCE, &ok), 0);
    cr_assert_not(ok);
    cr_assert_eq(idx_acl_allows(e, "alice", "default", "x", 0, &ok), 0);
    cr_assert_not(ok);
    idx_close(e);
}

/* ---- idempotence, rebuild, snapshot -------------------------------------- */

Test(index_security, reapplied_index_is_skipped)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct tern_wbuf w;
    struct idx_result r[2];
    unsigned n = 7;
    struct dump before, after;
    apply_workload(e);
    dump_env(e, &before);
    /* Raft re-delivers entry 6 (PRODUCER_INIT) and 10 (USER_DELETE). */
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 6);
    idx_cmd_producer_init(&w, "alice");
    idx_cmd_user_delete(&w, "bob");
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_apply(e, 6, w.base, w.len, r, 2, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(idx_apply(e, 10, w.base, w.len, r, 2, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(idx_flush(e), 0);
    dump_env(e, &after);
    cr_assert_str_eq(before.buf, after.buf);
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_security, same_command_twice_converges)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct dump d1, d2;
    cr_assert_eq(user_set(e, 1, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(ns_set(e, 2, "n", 4), 0);
    cr_assert_eq(acl_set(e, 3, "alice", "n", "*", 3), 0);
    dump_env(e, &d1);
    cr_assert_eq(user_set(e, 4, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(ns_set(e, 5, "n", 4), 0);
    cr_assert_eq(acl_set(e, 6, "alice", "n", "*", 3), 0);
    dump_env(e, &d2);
    cr_assert_str_eq(d1.buf, d2.buf);
    idx_close(e);
}

Test(index_security, tables_rebuilt_from_log)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct dump before, after;
    apply_workload(e);
    dump_env(e, &before);
    cr_assert_str_eq(before.buf,
                     "user alice 0 1 10:0102030405060708090a\n"
                     "user bob 2 11 0:\n"
                     "user root 1 2 3:aabbcc\n"
                     "acl alice default * 2\n"
                     "acl alice team1 orders* 3\n"
                     "ns default 0 0 0 0\n"
                     "ns team1 3 10 10000 70\n"
                     "next_pid 4\n"
                     "pid 1 alice 1\n"
                     "pid 2  1\n"
                     "pid 3 bob 0\n");
    idx_close(e);
    e = th_open(th_dir_a, 0);
    dump_env(e, &after);
    cr_assert_str_eq(before.buf, after.buf);
    /* The id counter continues where it was. */
    cr_assert_eq(producer_init(e, 13, NULL).base_offset, PID(4));
    idx_close(e);
}

Test(index_security, tables_survive_snapshot_install)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_env *b = th_open(th_dir_b, 3000);
    struct tern_wbuf man;
    struct dump da, db;
    uint64_t from, to;
    uint8_t buf[1000];
    apply_workload(a);
    tern_wbuf_init(&man);
    cr_assert_eq(idx_snapshot(a, &man), 0);
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    for (uint64_t pos = from; pos < to;) {
        size_t n = 0;
        size_t want = (size_t)TERN_MIN((uint64_t)sizeof buf, to - pos);
        cr_assert_eq(idx_bulk_read(a, pos, buf, want, &n), 0);
        cr_assert_eq(idx_bulk_write(b, pos, buf, n), 0);
        pos += n;
    }
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    cr_assert_eq(idx_flush(b), 0);
    dump_env(a, &da);
    dump_env(b, &db);
    cr_assert_str_eq(da.buf, db.buf);
    /* Both go on identically. */
    cr_assert_eq(producer_init(a, 13, "alice").base_offset, PID(4));
    cr_assert_eq(producer_init(b, 13, "alice").base_offset, PID(4));
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

/* ---- paged reads (the "after" cursors) --------------------------------- */

struct names
{
    char buf[1024];
    size_t len;
};

static void names_add(struct names *n, const char *s)
{
    int w = snprintf(n->buf + n->len, sizeof n->buf - n->len, "%s%s",
                     n->len > 0 ? " " : "", s);
    cr_assert(w > 0 && (size_t)w < sizeof n->buf - n->len);
    n->len += (size_t)w;
}

static int names_user(void *arg, const struct idx_user_info *u)
{
    names_add(arg, u->name);
    return 0;
}

static int names_ns(void *arg, const struct idx_namespace_info *ns)
{
    names_add(arg, ns->name);
    return 0;
}

static int names_acl(void *arg, const struct idx_acl *a)
{
    char s[256];
    (void)snprintf(s, sizeof s, "%s/%s/%s", a->user, a->ns, a->pattern);
    names_add(arg, s);
    return 0;
}

static const char *users_after(struct idx_env *e, const char *after)
{
    static struct names n;
    n.len = 0;
    n.buf[0] = '\0';
    cr_assert_eq(idx_user_list_after(e, after, names_user, &n), 0);
    return n.buf;
}

static const char *ns_after(struct idx_env *e, const char *after)
{
    static struct names n;
    n.len = 0;
    n.buf[0] = '\0';
    cr_assert_eq(idx_namespace_list_after(e, after, names_ns, &n), 0);
    return n.buf;
}

static const char *acls_after(struct idx_env *e,
                              const char *user,
                              const char *au,
                              const char *ans,
                              const char *ap)
{
    static struct names n;
    struct idx_acl a = {au, ans, ap, 0};
    n.len = 0;
    n.buf[0] = '\0';
    cr_assert_eq(
        idx_acl_list_after(e, user, au != NULL ? &a : NULL, names_acl, &n), 0);
    return n.buf;
}

Test(index_security, lists_after_a_cursor)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_acl bad = {"alice", "n1", "a*b", 0};
    struct names n = {0};
    cr_assert_eq(user_set(e, 1, "alice", 0, cred_a, sizeof cred_a), 0);
    cr_assert_eq(user_set(e, 2, "al", 0, cred_b, sizeof cred_b), 0);
    cr_assert_eq(user_set(e, 3, "bob", 0, cred_b, sizeof cred_b), 0);
    cr_assert_eq(ns_set(e, 4, "n1", 1), 0);
    cr_assert_eq(ns_set(e, 5, "n2", 2), 0);
    cr_assert_eq(ns_set(e, 6, "a0", 2), 0);
    cr_assert_eq(acl_set(e, 7, "alice", "n1", "*", 1), 0);
    cr_assert_eq(acl_set(e, 8, "alice", "n2", "*", 2), 0);
    cr_assert_eq(acl_set(e, 9, "alice", "n2", "x", 4), 0);
    cr_assert_eq(acl_set(e, 10, "al", "n1", "*", 1), 0);
    cr_assert_eq(acl_set(e, 11, "bob", "a0", "q*", 1), 0);

    cr_assert_str_eq(users_after(e, NULL), "al alice bob");
    cr_assert_str_eq(users_after(e, "al"), "alice bob");
    cr_assert_str_eq(users_after(e, "ali"), "alice bob");
    cr_assert_str_eq(users_after(e, "alice"), "bob");
    cr_assert_str_eq(users_after(e, "bob"), "");

    /* The implicit "default" sorts between a0 and n1. */
    cr_assert_str_eq(ns_after(e, ""), "a0 default n1 n2");
    cr_assert_str_eq(ns_after(e, "a0"), "default n1 n2");
    cr_assert_str_eq(ns_after(e, "default"), "n1 n2");
    cr_assert_str_eq(ns_after(e, "m"), "n1 n2");
    cr_assert_str_eq(ns_after(e, "n2"), "");

    cr_assert_str_eq(acls_after(e, NULL, NULL, NULL, NULL),
                     "al/n1/* alice/n1/* alice/n2/* alice/n2/x bob/a0/q*");
    cr_assert_str_eq(acls_after(e, NULL, "al", "n1", "*"),
                     "alice/n1/* alice/n2/* alice/n2/x bob/a0/q*");
    cr_assert_str_eq(acls_after(e, NULL, "alice", "n2", "*"),
                     "alice/n2/x bob/a0/q*");
    /* With a user filter: a cursor before the user's range starts it, one
     * inside continues it, one past it lists nothing. */
    cr_assert_str_eq(acls_after(e, "alice", "al", "n1", "*"),
                     "alice/n1/* alice/n2/* alice/n2/x");
    cr_assert_str_eq(acls_after(e, "alice", "alice", "n1", "*"),
                     "alice/n2/* alice/n2/x");
    cr_assert_str_eq(acls_after(e, "al", "alice", "n1", "*"), "");
    cr_assert_str_eq(acls_after(e, "alice", "alice", "n2", "x"), "");
    cr_assert_eq(idx_acl_list_after(e, NULL, &bad, names_acl, &n),
                 TERN_EBADNAME);
    cr_assert_eq(n.len, 0);
    idx_close(e);
}
