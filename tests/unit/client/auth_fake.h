/*
 * A server side for the fake server (fake_server.h) that speaks the login
 * (SCRAM-SHA-256 through auth_scram_server_*, user "alice" with password
 * AUTHSRV_PASSWORD), issues producer id blocks, and answers the user /
 * grant / namespace ops from a small model, recording what it received.
 * Shared by the libtern tests (test_auth.c) and the CLI tests.
 */
#ifndef TERN_TEST_AUTH_FAKE_H
#define TERN_TEST_AUTH_FAKE_H

#include <auth.h>

#include "fake_server.h"

#define AUTHSRV_PASSWORD "correct horse"

/* Server-side state of the hook (fs->hook_arg), guarded by fs->mu. */
struct authsrv
{
    struct auth_scram_cred cred; /* alice's */
    uint8_t fake_key[AUTH_SCRAM_KEY_SIZE];
    struct auth_scram_server *scram[FAKE_MAX_CONNS];
    int authed[FAKE_MAX_CONNS];
    int require_auth;
    int tamper_final;     /* flip a byte of the server signature */
    int drop_first_write; /* drop the connection on the first QUEUE_CREATE */
    int logins;           /* completed exchanges */
    int auth_failures;
    int unauthed_requests; /* requests before a login (must stay 0) */
    char last_ns[80];
    char last_mech[40];
    /* PRODUCER_INIT: 0 = not known (model: EINVAL), 1 = block, 2 =
     * TERN_EDENIED once then block. */
    int pid_mode;
    uint64_t pid_block;
    int pid_requests;
    int fail_first_produce;
    /* Admin model. */
    int user_sets;
    char user[130];
    uint32_t user_flags;
    uint8_t user_cred[AUTH_SCRAM_CRED_ENC_MAX];
    uint32_t user_cred_len;
    char acl_user[130];
    char acl_ns[80];
    char acl_pattern[210];
    uint32_t acl_perms;
    char ns_name[80];
    uint64_t ns_q[3];
    int last_op;
    int notfound_deletes; /* answer deletes TERN_ENOTFOUND */
};

/* Hook of the fake server; fs->hook_arg is the struct authsrv. */
enum fake_action auth_hook(struct fake_server *fs,
                           int conn,
                           const struct proto_header *h,
                           const struct proto_request *r);
/* Start fs with auth_hook over a (caller-owned, zeroed here; alice's
 * credential made, require_auth set); stop it and free a's exchanges. */
void start_auth_server(struct fake_server *fs, struct authsrv *a);
void stop_auth_server(struct fake_server *fs, struct authsrv *a);
/* A copy of *a taken under fs->mu. */
struct authsrv snap(struct fake_server *fs, const struct authsrv *a);

#endif /* TERN_TEST_AUTH_FAKE_H */
