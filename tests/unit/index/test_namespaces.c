/* Unit tests of namespaces in index/ (docs/AUTH.md, "Stored names",
 * "Quotas", "Producer ids"): qualified queue names "ns%q" through the
 * command codec, apply and the reads; a queue needs its namespace and a
 * namespace with queues cannot be deleted; the ns_usage counters (and
 * their rebuild from the log); the max_queues and max_bytes quotas;
 * producer-id blocks running out; the security generation. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_namespaces, .init = th_dirs_init, .fini = th_dirs_fini);

static const uint8_t cred[] = {1, 2, 3, 4};

/* ---- helpers ------------------------------------------------------------- */

/* Seal, apply at index and flush the single command the caller added to w
 * (after idx_cmd_begin); returns its result and frees w. */
static struct idx_result run1(struct idx_env *e,
                              uint64_t index,
                              struct tern_wbuf *w)
{
    struct idx_result r[1];
    memset(r, 0, sizeof r);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_free(w);
    return r[0];
}

static int create(struct idx_env *e, uint64_t index, const char *queue)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_queue_create(&w, queue);
    return run1(e, index, &w).status;
}

static int qdelete(struct idx_env *e, uint64_t index, const char *queue)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_queue_delete(&w, queue);
    return run1(e, index, &w).status;
}

/* A produce of n messages of len bytes each (byte value 'a' + index). */
static struct idx_result produce(struct idx_env *e,
                                 uint64_t index,
                                 const char *queue,
                                 uint64_t pid,
                                 uint64_t seq,
                                 uint32_t n,
                                 uint32_t len)
{
    static uint8_t data[4096];
    struct idx_msg m[8];
    struct tern_wbuf w;
    cr_assert(n <= 8 && len <= sizeof data);
    memset(data, 'a' + (int)(index % 26), len);
    for (uint32_t i = 0; i < n; i++) {
        m[i].data = data;
        m[i].len = len;
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_produce(&w, queue, pid, seq, m, n);
    return run1(e, index, &w);
}

static int ns_set(struct idx_env *e,
                  uint64_t index,
                  const char *name,
                  uint64_t max_queues,
                  uint64_t max_bytes)
{
    struct tern_wbuf w;
    struct idx_quota q = {max_queues, max_bytes, 0};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_namespace_set(&w, name, &q);
    return run1(e, index, &w).status;
}

static int ns_delete(struct idx_env *e, uint64_t index, const char *name)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_namespace_delete(&w, name);
    return run1(e, index, &w).status;
}

static void expect_usage(struct idx_env *e,
                         const char *ns,
                         uint64_t queues,
                         uint64_t bytes)
{
    uint64_t q = 99, b = 99;
    cr_assert_eq(idx_ns_usage(e, ns, &q, &b), 0, "%s", idx_errmsg(e));
    cr_assert_eq(q, queues, "usage of %s: %llu queues, want %llu",
                 ns != NULL ? ns : "(null)", (unsigned long long)q,
                 (unsigned long long)queues);
    cr_assert_eq(b, bytes, "usage of %s: %llu bytes, want %llu",
                 ns != NULL ? ns : "(null)", (unsigned long long)b,
                 (unsigned long long)bytes);
}

static uint64_t next_offset(struct idx_env *e, const char *queue)
{
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, queue, &qi), 0, "%s", idx_errmsg(e));
    return qi.next_offset;
}

/* ---- codec --------------------------------------------------------------- */

Test(index_namespaces, qualified_names_round_trip_through_codec)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx_msg m = {"hello", 5};
    char longest[TERN_NAME_MAX + 1];
    /* The longest stored name: a 64-byte namespace, '%', 135 bytes. */
    memset(longest, 'n', TERN_NS_NAME_MAX);
    longest[TERN_NS_NAME_MAX] = '%';
    memset(longest + TERN_NS_NAME_MAX + 1, 'q',
           TERN_NAME_MAX - TERN_NS_NAME_MAX - 1);
    longest[TERN_NAME_MAX] = '\0';

    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 7);
    idx_cmd_queue_create(&w, "acme%orders");
    idx_cmd_produce(&w, "acme%orders", 3, 1, &m, 1);
    idx_cmd_group_commit(&w, "acme%orders", "billing", 1);
    idx_cmd_queue_delete(&w, longest);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_QUEUE_CREATE);
    cr_assert_eq(c.queue_len, 11);
    cr_assert_eq(memcmp(c.queue, "acme%orders", 11), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_PRODUCE);
    cr_assert_eq(c.queue_len, 11);
    cr_assert_eq(memcmp(c.queue, "acme%orders", 11), 0);
    cr_assert_eq(c.n_msgs, 1);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_GROUP_COMMIT);
    cr_assert_eq(memcmp(c.queue, "acme%orders", 11), 0);
    cr_assert_eq(c.group_len, 7);
    cr_assert_eq(memcmp(c.group, "billing", 7), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_QUEUE_DELETE);
    cr_assert_eq(c.queue_len, TERN_NAME_MAX);
    cr_assert_eq(memcmp(c.queue, longest, TERN_NAME_MAX), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
}

static int build_create(const char *queue)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, queue);
    int rc = idx_cmd_end(&w);
    tern_wbuf_free(&w);
    return rc;
}

Test(index_namespaces, builder_rejects_bad_qualified_names)
{
    char ns_long[TERN_NS_NAME_MAX + 8];
    char total_long[TERN_NAME_MAX + 2];
    memset(ns_long, 'n', TERN_NS_NAME_MAX + 1);
    memcpy(ns_long + TERN_NS_NAME_MAX + 1, "%q", 3);
    memset(total_long, 'q', sizeof total_long - 1);
    memcpy(total_long, "ns%", 3);
    total_long[sizeof total_long - 1] = '\0';
    cr_assert_eq(build_create("%q"), TERN_EBADNAME);
    cr_assert_eq(build_create("ns%"), TERN_EBADNAME);
    cr_assert_eq(build_create("a%b%c"), TERN_EBADNAME);
    cr_assert_eq(build_create("a b%q"), TERN_EBADNAME);
    cr_assert_eq(build_create(ns_long), TERN_EBADNAME);
    cr_assert_eq(build_create(total_long), TERN_EBADNAME);
    cr_assert_eq(build_create("ns%q"), 0);

    /* Group, user and namespace names stay plain. */
    struct tern_wbuf w;
    struct idx_quota q = {0};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_group_commit(&w, "ns%q", "g%x", 0);
    cr_assert_eq(idx_cmd_end(&w), TERN_EBADNAME);
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_namespace_set(&w, "a%b", &q);
    cr_assert_eq(idx_cmd_end(&w), TERN_EBADNAME);
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_user_delete(&w, "a%b");
    cr_assert_eq(idx_cmd_end(&w), TERN_EBADNAME);
    tern_wbuf_free(&w);
}

Test(index_namespaces, decoder_rejects_separator_outside_queue_names)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    /* GROUP_COMMIT: header 24, type 1, len 4, qname "ns%q" (1 + 4),
     * group "gx" (1 + 2), next_offset. */
    idx_cmd_begin(&w, 1);
    idx_cmd_group_commit(&w, "ns%q", "gx", 0);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    w.base[24 + 5 + 5 + 1 + 1] = '%';
    cr_assert_eq(idx_cmd_end(&w), 0); /* reseal */
    cr_assert_eq(idx_cmd_validate(w.base, w.len), TERN_EMALFORMED);
    /* A second separator in the queue name. */
    w.base[24 + 5 + 5 + 1 + 1] = 'x';
    w.base[24 + 5 + 1] = '%';
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

/* ---- apply and reads ----------------------------------------------------- */

/* Appends "name " to the 512-byte string at arg. */
static int list_names(void *arg, const struct idx_queue_info *q)
{
    char *out = arg;
    size_t n = strlen(out);
    int w = snprintf(out + n, 512 - n, "%s ", q->name);
    cr_assert(w > 0 && (size_t)w < 512 - n);
    return 0;
}

/* Stops at the first queue outside namespace "acme". */
static int list_acme(void *arg, const struct idx_queue_info *q)
{
    if (strncmp(q->name, "acme%", 5) != 0) {
        return 1;
    }
    return list_names(arg, q);
}

Test(index_namespaces, qualified_queue_apply_fetch_list)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct th_msgs got = {0};
    struct idx_queue_info qi;
    struct tern_wbuf w;
    uint64_t off = 9;
    char names[512] = "";
    cr_assert_eq(ns_set(e, 1, "acme", 0, 0), 0);
    cr_assert_eq(create(e, 2, "acme%orders"), 0);
    cr_assert_eq(create(e, 3, "orders"), 0);
    cr_assert_eq(create(e, 4, "acme%a"), 0);
    cr_assert_eq(create(e, 5, "acme-x"), 0);
    cr_assert_eq(create(e, 6, "acme%orders"), TERN_EQUEUEEXISTS);
    struct idx_result r = produce(e, 7, "acme%orders", 0, 0, 3, 10);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.count, 3);
    cr_assert_eq(produce(e, 8, "orders", 0, 0, 1, 4).status, 0);

    cr_assert_eq(th_fetch_all(e, "acme%orders", 10, 1 << 20, &got), 0);
    cr_assert_eq(got.n, 3);
    cr_assert_eq(got.v[0].len, 10);
    cr_assert_eq(got.v[0].data[0], 'a' + 7);
    th_msgs_free(&got);
    cr_assert_eq(th_fetch_all(e, "orders", 10, 1 << 20, &got), 0);
    cr_assert_eq(got.n, 1);
    th_msgs_free(&got);

    cr_assert_eq(idx_queue_get(e, "acme%orders", &qi), 0);
    cr_assert_str_eq(qi.name, "acme%orders");
    cr_assert_eq(qi.next_offset, 3);
    cr_assert_eq(qi.bytes, 30);
    cr_assert_eq(idx_queue_get(e, "acme%nope", &qi), TERN_ENOQUEUE);
    cr_assert_eq(idx_queue_get(e, "acme%", &qi), TERN_EBADNAME);

    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 9);
    idx_cmd_group_commit(&w, "acme%orders", "billing", 2);
    cr_assert_eq(run1(e, 9, &w).status, 0);
    cr_assert_eq(idx_group_offset(e, "acme%orders", "billing", &off), 0);
    cr_assert_eq(off, 2);
    cr_assert_eq(idx_group_offset(e, "orders", "billing", &off), 0);
    cr_assert_eq(off, 0);
    cr_assert_eq(idx_group_offset(e, "acme%orders", "b%x", &off),
                 TERN_EBADNAME);

    cr_assert_eq(idx_queue_list(e, list_names, names), 0);
    cr_assert_str_eq(names, "acme%a acme%orders acme-x orders ");
    names[0] = '\0';
    cr_assert_eq(idx_queue_list_after(e, "acme%", list_acme, names), 0);
    cr_assert_str_eq(names, "acme%a acme%orders ");
    names[0] = '\0';
    cr_assert_eq(idx_queue_list_after(e, "acme%a", list_acme, names), 0);
    cr_assert_str_eq(names, "acme%orders ");
    idx_close(e);
}

Test(index_namespaces, queue_needs_its_namespace)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_info qi;
    cr_assert_eq(create(e, 1, "ghost%q"), TERN_ENOTFOUND);
    cr_assert_eq(idx_queue_get(e, "ghost%q", &qi), TERN_ENOQUEUE);
    expect_usage(e, "ghost", 0, 0);
    cr_assert_eq(ns_set(e, 2, "ghost", 0, 0), 0);
    cr_assert_eq(create(e, 3, "ghost%q"), 0);
    cr_assert_eq(idx_queue_get(e, "ghost%q", &qi), 0);
    /* Plain names are queues of "default", which always exists. */
    cr_assert_eq(create(e, 4, "q"), 0);
    idx_close(e);
}

Test(index_namespaces, namespace_delete_refused_while_it_has_queues)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_namespace_info ni;
    cr_assert_eq(ns_set(e, 1, "acme", 0, 0), 0);
    cr_assert_eq(create(e, 2, "acme%q1"), 0);
    cr_assert_eq(create(e, 3, "acme%q2"), 0);
    /* Queues of other namespaces do not count. */
    cr_assert_eq(ns_set(e, 4, "other", 0, 0), 0);
    cr_assert_eq(create(e, 5, "other%q1"), 0);
    cr_assert_eq(ns_delete(e, 6, "acme"), TERN_EINVAL);
    cr_assert_eq(idx_namespace_get(e, "acme", &ni), 0);
    cr_assert_eq(qdelete(e, 7, "acme%q1"), 0);
    cr_assert_eq(ns_delete(e, 8, "acme"), TERN_EINVAL);
    cr_assert_eq(qdelete(e, 9, "acme%q2"), 0);
    cr_assert_eq(ns_delete(e, 10, "acme"), 0);
    cr_assert_eq(idx_namespace_get(e, "acme", &ni), TERN_ENOTFOUND);
    cr_assert_eq(create(e, 11, "acme%q1"), TERN_ENOTFOUND);
    cr_assert_eq(ns_delete(e, 12, "acme"), TERN_ENOTFOUND);
    cr_assert_eq(ns_delete(e, 13, "default"), TERN_EINVAL);
    idx_close(e);
}

/* ---- usage counters ------------------------------------------------------ */

Test(index_namespaces, usage_counts_and_rebuild)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t q, b;
    cr_assert_eq(ns_set(e, 1, "acme", 0, 0), 0);
    expect_usage(e, "acme", 0, 0);
    expect_usage(e, NULL, 0, 0);
    cr_assert_eq(create(e, 2, "acme%q1"), 0);
    cr_assert_eq(create(e, 3, "acme%q2"), 0);
    cr_assert_eq(create(e, 4, "plain"), 0);
    expect_usage(e, "acme", 2, 0);
    expect_usage(e, "default", 1, 0);
    cr_assert_eq(produce(e, 5, "acme%q1", 0, 0, 3, 100).status, 0);
    cr_assert_eq(produce(e, 6, "acme%q2", 7, 1, 2, 50).status, 0);
    cr_assert_eq(produce(e, 7, "plain", 0, 0, 1, 9).status, 0);
    /* A duplicate and a failed produce add nothing. */
    cr_assert_eq(produce(e, 8, "acme%q2", 7, 1, 2, 50).duplicate, 1);
    cr_assert_eq(produce(e, 9, "acme%nope", 0, 0, 1, 50).status, TERN_ENOQUEUE);
    expect_usage(e, "acme", 2, 400);
    expect_usage(e, "default", 1, 9);
    expect_usage(e, NULL, 1, 9);
    expect_usage(e, "", 1, 9);
    expect_usage(e, "unknown", 0, 0);
    cr_assert_eq(idx_ns_usage(e, "bad name", &q, &b), TERN_EBADNAME);
    cr_assert_eq(idx_ns_usage(e, "a%b", &q, &b), TERN_EBADNAME);

    /* Deleting a queue gives its bytes back. */
    cr_assert_eq(qdelete(e, 10, "acme%q1"), 0);
    expect_usage(e, "acme", 1, 100);
    cr_assert_eq(create(e, 11, "acme%q1"), 0);
    expect_usage(e, "acme", 2, 100);
    cr_assert_eq(produce(e, 12, "acme%q1", 0, 0, 1, 33).status, 0);
    expect_usage(e, "acme", 2, 133);
    cr_assert_eq(qdelete(e, 13, "plain"), 0);
    expect_usage(e, "default", 0, 0);
    idx_close(e);

    /* The counters are derived from the log: a reopen gives the same. */
    e = th_open(th_dir_a, 0);
    expect_usage(e, "acme", 2, 133);
    expect_usage(e, "default", 0, 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "acme%q2", &qi), 0);
    cr_assert_eq(qi.bytes, 100);
    idx_close(e);
}

Test(index_namespaces, usage_follows_snapshot_install)
{
    struct idx_env *a = th_open(th_dir_a, 0);
    struct idx_env *b = th_open(th_dir_b, 0);
    struct tern_wbuf man;
    uint64_t from, to;
    uint8_t buf[512];
    cr_assert_eq(ns_set(a, 1, "acme", 5, 0), 0);
    cr_assert_eq(create(a, 2, "acme%q"), 0);
    cr_assert_eq(produce(a, 3, "acme%q", 0, 0, 4, 25).status, 0);
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
    uint64_t gen = idx_security_gen(b);
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    cr_assert_gt(idx_security_gen(b), gen);
    expect_usage(b, "acme", 1, 100);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

/* ---- quotas -------------------------------------------------------------- */

Test(index_namespaces, max_queues_quota)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_info qi;
    cr_assert_eq(ns_set(e, 1, "acme", 2, 0), 0);
    cr_assert_eq(create(e, 2, "acme%q1"), 0);
    cr_assert_eq(create(e, 3, "acme%q2"), 0);
    cr_assert_eq(create(e, 4, "acme%q3"), TERN_EQUOTA);
    cr_assert_eq(idx_queue_get(e, "acme%q3", &qi), TERN_ENOQUEUE);
    /* An existing queue still answers that it exists. */
    cr_assert_eq(create(e, 5, "acme%q1"), TERN_EQUEUEEXISTS);
    expect_usage(e, "acme", 2, 0);
    cr_assert_eq(qdelete(e, 6, "acme%q1"), 0);
    cr_assert_eq(create(e, 7, "acme%q3"), 0);
    /* Raising the quota lets more in; lowering it below the count keeps
     * the queues but refuses new ones. */
    cr_assert_eq(ns_set(e, 8, "acme", 3, 0), 0);
    cr_assert_eq(create(e, 9, "acme%q4"), 0);
    cr_assert_eq(ns_set(e, 10, "acme", 1, 0), 0);
    cr_assert_eq(create(e, 11, "acme%q5"), TERN_EQUOTA);
    cr_assert_eq(idx_queue_get(e, "acme%q4", &qi), 0);
    /* 0 is unlimited. */
    cr_assert_eq(ns_set(e, 12, "acme", 0, 0), 0);
    cr_assert_eq(create(e, 13, "acme%q5"), 0);
    expect_usage(e, "acme", 4, 0);
    idx_close(e);
}

Test(index_namespaces, default_quota_only_once_set)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    char name[16];
    for (int i = 0; i < 5; i++) {
        (void)snprintf(name, sizeof name, "q%d", i);
        cr_assert_eq(create(e, 1 + (uint64_t)i, name), 0);
    }
    cr_assert_eq(produce(e, 6, "q0", 0, 0, 8, 4000).status, 0);
    /* A quota of another namespace does not apply to "default". */
    cr_assert_eq(ns_set(e, 7, "acme", 1, 1), 0);
    cr_assert_eq(create(e, 8, "q5"), 0);
    cr_assert_eq(ns_set(e, 9, "default", 6, 32010), 0);
    cr_assert_eq(create(e, 10, "q6"), TERN_EQUOTA);
    cr_assert_eq(produce(e, 11, "q1", 0, 0, 1, 10).status, 0);
    cr_assert_eq(produce(e, 12, "q1", 0, 0, 1, 1).status, TERN_EQUOTA);
    expect_usage(e, "default", 6, 32010);
    idx_close(e);
}

Test(index_namespaces, max_bytes_quota)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct th_msgs got = {0};
    struct idx_result r;
    cr_assert_eq(ns_set(e, 1, "acme", 0, 100), 0);
    cr_assert_eq(create(e, 2, "acme%q"), 0);
    cr_assert_eq(create(e, 3, "acme%p"), 0);
    r = produce(e, 4, "acme%q", 5, 1, 2, 30);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.count, 2);
    /* 60 + 50 > 100: refused whole, nothing appended. */
    r = produce(e, 5, "acme%q", 5, 2, 1, 50);
    cr_assert_eq(r.status, TERN_EQUOTA);
    cr_assert_eq(r.count, 0);
    cr_assert_eq(r.duplicate, 0);
    cr_assert_eq(next_offset(e, "acme%q"), 2);
    expect_usage(e, "acme", 2, 60);
    cr_assert_eq(th_fetch_all(e, "acme%q", 10, 1 << 20, &got), 0);
    cr_assert_eq(got.n, 2);
    th_msgs_free(&got);
    /* The namespace's bytes count, not the queue's. */
    cr_assert_eq(produce(e, 6, "acme%p", 0, 0, 1, 41).status, TERN_EQUOTA);
    /* A resend of the applied batch still answers duplicate. */
    r = produce(e, 7, "acme%q", 5, 1, 2, 30);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.duplicate, 1);
    cr_assert_eq(r.base_offset, 0);
    cr_assert_eq(r.count, 2);
    /* The refused batch left the producer state alone: seq 2 is still the
     * next one, and exactly filling the quota is allowed. */
    r = produce(e, 8, "acme%q", 5, 2, 1, 40);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.duplicate, 0);
    cr_assert_eq(r.base_offset, 2);
    expect_usage(e, "acme", 2, 100);
    cr_assert_eq(produce(e, 9, "acme%p", 0, 0, 1, 1).status, TERN_EQUOTA);
    /* A batch larger than the quota on its own. */
    cr_assert_eq(ns_set(e, 10, "acme", 0, 1000), 0);
    cr_assert_eq(produce(e, 11, "acme%p", 0, 0, 8, 1000).status, TERN_EQUOTA);
    /* Deleting a queue frees its bytes for the others. */
    cr_assert_eq(qdelete(e, 12, "acme%q"), 0);
    cr_assert_eq(produce(e, 13, "acme%p", 0, 0, 1, 1000).status, 0);
    expect_usage(e, "acme", 1, 1000);
    idx_close(e);

    /* The same decisions replay identically at open. */
    e = th_open(th_dir_a, 0);
    expect_usage(e, "acme", 1, 1000);
    cr_assert_eq(next_offset(e, "acme%p"), 1);
    idx_close(e);
}

Test(index_namespaces, quota_is_per_command_of_an_entry)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct tern_wbuf w;
    struct idx_result r[3];
    struct idx_msg m = {"0123456789", 10};
    cr_assert_eq(ns_set(e, 1, "acme", 0, 25), 0);
    cr_assert_eq(create(e, 2, "acme%q"), 0);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 3);
    idx_cmd_produce(&w, "acme%q", 0, 0, &m, 1);
    idx_cmd_produce(&w, "acme%q", 0, 0, &m, 1);
    idx_cmd_produce(&w, "acme%q", 0, 0, &m, 1);
    cr_assert_eq(th_apply(e, 3, &w, r, 3), 3);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(r[0].status, 0);
    cr_assert_eq(r[1].status, 0);
    cr_assert_eq(r[1].base_offset, 1);
    cr_assert_eq(r[2].status, TERN_EQUOTA);
    expect_usage(e, "acme", 1, 20);
    tern_wbuf_free(&w);
    idx_close(e);
}

/* ---- producer-id blocks -------------------------------------------------- */

static struct idx_result producer_init(struct idx_env *e,
                                       uint64_t index,
                                       const char *owner)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, index);
    idx_cmd_producer_init(&w, owner);
    return run1(e, index, &w);
}

Test(index_namespaces, producer_id_blocks_run_out)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    char owner[TERN_NAME_MAX + 1];
    bool owned;
    /* Jump to the last block (2^32 entries cannot be applied in a test). */
    e->st.next_producer_id = IDX__PID_BLOCK_MAX;
    e->committed.next_producer_id = IDX__PID_BLOCK_MAX;
    struct idx_result r = producer_init(e, 1, NULL);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.base_offset, UINT64_C(0xffffffff00000000));
    cr_assert_eq(idx_producer_owner(e, UINT64_MAX, owner, &owned), 0);
    cr_assert(owned);
    r = producer_init(e, 2, NULL);
    cr_assert_eq(r.status, TERN_ELIMIT);
    cr_assert_eq(r.base_offset, 0);
    cr_assert_eq(idx_next_producer_id(e), UINT64_C(1) << 32);
    idx_close(e);
}

/* ---- security generation ------------------------------------------------- */

/* Apply one command at index without flushing, check that the generation
 * did not move yet, flush, and return whether it moved then. */
static bool gen_moves(struct idx_env *e, uint64_t index, struct tern_wbuf *w)
{
    struct idx_result r[1];
    uint64_t before = idx_security_gen(e);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(idx_security_gen(e), before);
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_free(w);
    return idx_security_gen(e) != before;
}

Test(index_namespaces, security_gen)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct tern_wbuf w;
    struct idx_quota q = {0};
    struct idx_msg m = {"x", 1};
    uint64_t i = 0;
    uint64_t g0 = idx_security_gen(e);

#define STEP(build, moves)                                                     \
    do {                                                                       \
        tern_wbuf_init(&w);                                                    \
        idx_cmd_begin(&w, ++i);                                                \
        build;                                                                 \
        cr_assert_eq(gen_moves(e, i, &w), (moves), "step %llu",                \
                     (unsigned long long)i);                                   \
    } while (0)

    STEP(idx_cmd_user_set(&w, "alice", 0, cred, sizeof cred), true);
    STEP(idx_cmd_namespace_set(&w, "acme", &q), true);
    STEP(idx_cmd_acl_set(&w, "alice", "acme", "*", IDX_PERM_PRODUCE), true);
    STEP(idx_cmd_producer_init(&w, "alice"), true);
    STEP(idx_cmd_queue_create(&w, "acme%q"), false);
    STEP(idx_cmd_produce(&w, "acme%q", 0, 0, &m, 1), false);
    STEP(idx_cmd_group_commit(&w, "acme%q", "g", 1), false);
    STEP(idx_cmd_read_barrier(&w), false);
    STEP(idx_cmd_queue_delete(&w, "acme%q"), false);
    STEP(idx_cmd_acl_delete(&w, "alice", "acme", "*"), true);
    /* A command that changes nothing leaves it alone. */
    STEP(idx_cmd_acl_delete(&w, "alice", "acme", "*"), false);
    STEP(idx_cmd_user_delete(&w, "bob"), false);
    STEP(idx_cmd_namespace_delete(&w, "acme"), true);
    STEP(idx_cmd_user_delete(&w, "alice"), true);
#undef STEP
    cr_assert_gt(idx_security_gen(e), g0);
    idx_close(e);
    e = th_open(th_dir_a, 0);
    cr_assert_gt(idx_security_gen(e), 0);
    idx_close(e);
}
