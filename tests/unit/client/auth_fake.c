/*
 * The fake server's login, producer id and admin side (auth_fake.h). Runs
 * on the fake server's thread with fs->mu held. Criterion assertions here
 * fail the calling test.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern_common.h>

#include "auth_fake.h"

static void copy_n(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static void send_error_msg(struct fake_server *fs,
                           int conn,
                           const struct proto_header *h,
                           int status,
                           const char *msg)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    proto_encode_error(&w, h->op, h->request_id, status, msg, 0, NULL);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

static void send_auth_resp(struct fake_server *fs,
                           int conn,
                           const struct proto_header *h,
                           const void *data,
                           size_t len)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    proto_encode_auth_resp(&w, h->op, h->request_id, data, (uint32_t)len);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

static enum fake_action on_auth(struct fake_server *fs,
                                struct authsrv *a,
                                int conn,
                                const struct proto_header *h,
                                const struct proto_request *r)
{
    char why[TERN_ERRMSG_SIZE];
    const char *user = NULL;
    const char *msg = NULL;
    size_t len = 0;
    int rv;
    if (r->op == PROTO_OP_AUTH_START) {
        copy_n(a->last_ns, sizeof a->last_ns, r->ns, r->ns_len);
        copy_n(a->last_mech, sizeof a->last_mech, r->mechanism,
               r->mechanism_len);
        a->authed[conn] = 0;
        auth_scram_server_free(a->scram[conn]);
        a->scram[conn] = NULL;
        cr_assert_eq(
            auth_scram_server_new(a->fake_key, 0, &a->scram[conn], why), 0);
        rv = auth_scram_server_start(a->scram[conn], (const char *)r->auth_data,
                                     r->auth_data_len, &user, &msg, &len, why);
        if (rv == 0) {
            rv = auth_scram_server_first(
                a->scram[conn], strcmp(user, "alice") == 0 ? &a->cred : NULL,
                &msg, &len, why);
        }
        if (rv != 0) {
            a->auth_failures++;
            send_error_msg(fs, conn, h, TERN_EAUTH, why);
            return FAKE_HANDLED;
        }
        send_auth_resp(fs, conn, h, msg, len);
        return FAKE_HANDLED;
    }
    if (a->scram[conn] == NULL) {
        send_error_msg(fs, conn, h, TERN_EAUTH, "no exchange");
        return FAKE_HANDLED;
    }
    rv = auth_scram_server_final(a->scram[conn], (const char *)r->auth_data,
                                 r->auth_data_len, &msg, &len, why);
    if (rv != 0) {
        char m[TERN_ERRMSG_SIZE];
        (void)snprintf(m, sizeof m, "authentication failed: %.*s", (int)len,
                       msg != NULL ? msg : "");
        a->auth_failures++;
        send_error_msg(fs, conn, h, TERN_EAUTH, m);
        auth_scram_server_free(a->scram[conn]);
        a->scram[conn] = NULL;
        return FAKE_HANDLED;
    }
    if (a->tamper_final) {
        char copy[256];
        cr_assert_lt(len, sizeof copy);
        memcpy(copy, msg, len);
        copy[3] = copy[3] == 'A' ? 'B' : 'A'; /* inside the signature */
        send_auth_resp(fs, conn, h, copy, len);
    } else {
        send_auth_resp(fs, conn, h, msg, len);
    }
    auth_scram_server_free(a->scram[conn]);
    a->scram[conn] = NULL;
    a->authed[conn] = 1;
    a->logins++;
    return FAKE_HANDLED;
}

static void send_empty(struct fake_server *fs,
                       int conn,
                       const struct proto_header *h)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    proto_encode_empty_resp(&w, h->op, h->request_id);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

static enum fake_action on_admin(struct fake_server *fs,
                                 struct authsrv *a,
                                 int conn,
                                 const struct proto_header *h,
                                 const struct proto_request *r)
{
    struct tern_wbuf w;
    size_t start;
    a->last_op = r->op;
    switch (r->op) {
    case PROTO_OP_USER_SET:
        a->user_sets++;
        copy_n(a->user, sizeof a->user, r->user, r->user_len);
        a->user_flags = r->bits;
        a->user_cred_len = r->cred_len;
        memcpy(a->user_cred, r->cred, r->cred_len);
        send_empty(fs, conn, h);
        return FAKE_HANDLED;
    case PROTO_OP_ACL_SET:
        copy_n(a->acl_user, sizeof a->acl_user, r->user, r->user_len);
        copy_n(a->acl_ns, sizeof a->acl_ns, r->ns, r->ns_len);
        copy_n(a->acl_pattern, sizeof a->acl_pattern, r->pattern,
               r->pattern_len);
        a->acl_perms = r->bits;
        send_empty(fs, conn, h);
        return FAKE_HANDLED;
    case PROTO_OP_NAMESPACE_SET:
        copy_n(a->ns_name, sizeof a->ns_name, r->ns, r->ns_len);
        a->ns_q[0] = r->max_queues;
        a->ns_q[1] = r->max_bytes_quota;
        a->ns_q[2] = r->produce_bytes_per_s;
        send_empty(fs, conn, h);
        return FAKE_HANDLED;
    case PROTO_OP_USER_DELETE:
    case PROTO_OP_ACL_DELETE:
    case PROTO_OP_NAMESPACE_DELETE:
        if (a->notfound_deletes) {
            send_error_msg(fs, conn, h, TERN_ENOTFOUND, "no such thing");
        } else {
            copy_n(
                a->user, sizeof a->user,
                r->op == PROTO_OP_NAMESPACE_DELETE ? r->ns : r->user,
                r->op == PROTO_OP_NAMESPACE_DELETE ? r->ns_len : r->user_len);
            send_empty(fs, conn, h);
        }
        return FAKE_HANDLED;
    case PROTO_OP_USER_LIST:
        tern_wbuf_init(&w);
        start = proto_list_begin(&w, PROTO_OP_USER_LIST, h->request_id);
        proto_put_user_entry(&w, "alice", PROTO_USER_ADMIN, 1);
        proto_put_user_entry(&w, "node-app", PROTO_USER_CERT, 0);
        proto_list_end(&w, start, 2);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    case PROTO_OP_ACL_LIST:
        a->acl_user[0] = '\0';
        copy_n(a->acl_user, sizeof a->acl_user, r->user, r->user_len);
        tern_wbuf_init(&w);
        start = proto_list_begin(&w, PROTO_OP_ACL_LIST, h->request_id);
        proto_put_acl_entry(&w, "bob", "acme", "orders.*", 3);
        proto_put_acl_entry(&w, "bob", "default", "*", 15);
        proto_put_acl_entry(&w, "carol", "acme", "audit", 2);
        proto_list_end(&w, start, 3);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    case PROTO_OP_NAMESPACE_LIST:
        tern_wbuf_init(&w);
        start = proto_list_begin(&w, PROTO_OP_NAMESPACE_LIST, h->request_id);
        proto_put_namespace_entry(&w, "acme", 10, 1u << 20, 4096);
        proto_put_namespace_entry(&w, "default", 0, 0, 0);
        proto_list_end(&w, start, 2);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    default:
        return FAKE_DEFAULT;
    }
}

enum fake_action auth_hook(struct fake_server *fs,
                           int conn,
                           const struct proto_header *h,
                           const struct proto_request *r)
{
    struct authsrv *a = fs->hook_arg;
    struct tern_wbuf w;
    if (a == NULL) {
        return FAKE_DEFAULT;
    }
    if (r->op == PROTO_OP_AUTH_START || r->op == PROTO_OP_AUTH_CONTINUE) {
        return on_auth(fs, a, conn, h, r);
    }
    if (a->require_auth && !a->authed[conn]) {
        a->unauthed_requests++;
        send_error_msg(fs, conn, h, TERN_EAUTH, "authenticate first");
        return FAKE_HANDLED;
    }
    if (r->op == PROTO_OP_QUEUE_CREATE && a->drop_first_write) {
        a->drop_first_write = 0;
        a->authed[conn] = 0;
        return FAKE_DROP;
    }
    if (r->op == PROTO_OP_PRODUCER_INIT) {
        a->pid_requests++;
        if (a->pid_mode == 0) {
            return FAKE_DEFAULT; /* the model: unknown op, TERN_EINVAL */
        }
        if (a->pid_mode == 2) {
            a->pid_mode = 1;
            send_error_msg(fs, conn, h, TERN_EDENIED, "no ids for you");
            return FAKE_HANDLED;
        }
        tern_wbuf_init(&w);
        proto_encode_producer_init_resp(&w, h->request_id, a->pid_block);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    }
    if (r->op == PROTO_OP_PRODUCE && a->fail_first_produce) {
        a->fail_first_produce = 0;
        send_error_msg(fs, conn, h, TERN_ETOOBIG, "too big");
        return FAKE_HANDLED;
    }
    return on_admin(fs, a, conn, h, r);
}

/* Start fs with the hook and a; alice's credential from AUTHSRV_PASSWORD. */
void start_auth_server(struct fake_server *fs, struct authsrv *a)
{
    char why[TERN_ERRMSG_SIZE];
    memset(a, 0, sizeof *a);
    cr_assert_eq(auth_scram_cred_make(AUTHSRV_PASSWORD, 0, &a->cred, why), 0,
                 "%s", why);
    memset(a->fake_key, 7, sizeof a->fake_key);
    a->require_auth = 1;
    cr_assert_eq(fake_start(fs, auth_hook), 0);
    (void)pthread_mutex_lock(&fs->mu);
    fs->hook_arg = a;
    (void)pthread_mutex_unlock(&fs->mu);
}

void stop_auth_server(struct fake_server *fs, struct authsrv *a)
{
    fake_stop(fs);
    for (int i = 0; i < FAKE_MAX_CONNS; i++) {
        auth_scram_server_free(a->scram[i]);
    }
}

/* A snapshot of a under fs->mu. */
struct authsrv snap(struct fake_server *fs, const struct authsrv *a)
{
    struct authsrv s;
    (void)pthread_mutex_lock(&fs->mu);
    s = *a;
    (void)pthread_mutex_unlock(&fs->mu);
    return s;
}
