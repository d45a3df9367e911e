/*
 * Who a client connection is and what it may do (docs/AUTH.md): the
 * AUTH_START / AUTH_CONTINUE exchange (SCRAM-SHA-256 against the users
 * table, or EXTERNAL by the TLS client certificate), the per-op
 * permission checks over the replicated grants, the namespace a
 * connection's queue names are qualified with, producer-id ownership and
 * the per-namespace produce rate. Private to node/; used by server.c on
 * the loop thread only.
 */
#ifndef TERN_NODE_ACCESS_H
#define TERN_NODE_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <idx.h>
#include <proto.h>
#include <tern_common.h>

#include "config.h"

struct node_access;
struct auth_scram_server;

enum node_principal_state {
    NODE_PRINCIPAL_NONE = 0, /* has not authenticated */
    NODE_PRINCIPAL_SCRAM,    /* AUTH_START answered, AUTH_CONTINUE due */
    NODE_PRINCIPAL_DONE,     /* authenticated */
};

/* A connection's identity; zero-initialised = not authenticated, in the
 * namespace "default". Embedded in the connection, cleared with
 * node_principal_clear. */
struct node_principal
{
    enum node_principal_state state;
    char user[IDX_USER_NAME_MAX + 1]; /* "" until authenticated */
    uint64_t created_index;           /* the user's, at authentication */
    char ns[TERN_NS_NAME_MAX + 1];    /* "" = "default" */
    struct auth_scram_server *scram;  /* owned, during SCRAM */
    /* The producer-id block last found to be this user's (0: none). */
    uint64_t pid_block;
};

/* Server-wide state: whether authentication is required, the key the
 * answers for unknown users derive from (secret's MAC: the cluster
 * secret the node loaded, borrowed for the call only; NULL when no
 * cluster_secret_file is configured, then a random key; NULL with a file
 * configured is TERN_EINVAL), the produce rate buckets (one per namespace
 * that has a rate, at most one per namespace) and the login failures per
 * source address. cfg is borrowed and must outlive a. 0, or a code with
 * errmsg. */
struct auth_secret;
int node_access_new(const struct node_config *cfg,
                    const struct auth_secret *secret,
                    struct node_access **out,
                    char *errmsg);
void node_access_free(struct node_access *a);
bool node_access_required(const struct node_access *a);

void node_principal_clear(struct node_principal *p);

/* AUTH_START or AUTH_CONTINUE r for p. 0: answer with reply[0..*reply_len)
 * (OUT, borrowed from p until its next exchange step or clear; the
 * exchange is done when p->state is NODE_PRINCIPAL_DONE). TERN_EAUTH with
 * errmsg: answer it and close the connection. cert_cn: the verified
 * client certificate's CN, "" without one. */
int node_access_auth(struct node_access *a,
                     struct node_principal *p,
                     struct idx_env *e,
                     const struct proto_request *r,
                     const char *cert_cn,
                     const void **reply,
                     size_t *reply_len,
                     char *errmsg);

/* Whether p may do r (its names as the client sent them): 0,
 * TERN_EAUTH ("authenticate first": authentication is required and p has
 * not), TERN_EDENIED (naming the permission), TERN_EINVAL (USER_SET with
 * a credential that is not one), with errmsg. AUTH ops are not checked
 * here. */
int node_access_check(struct node_access *a,
                      const struct node_principal *p,
                      struct idx_env *e,
                      const struct proto_request *r,
                      char *errmsg);

/* The stored name of queue[0..len) for p's namespace into out
 * (caller-owned, TERN_NAME_MAX + 1 bytes). TERN_EBADNAME with errmsg when
 * it does not fit TERN_NAME_MAX with the namespace prefix. */
int node_access_qualify(const struct node_principal *p,
                        const char *queue,
                        size_t len,
                        char *out,
                        char *errmsg);

/* QUEUE_LIST of p: node_access_list_begin gives the stored name to list
 * after (out: TERN_NAME_MAX + 2 bytes, caller-owned) for the client's
 * after[0..len) ("" = from the first queue of the namespace) and loads
 * p's grants; node_access_list_show says, for each stored name in order,
 * whether the walk is past p's namespace (returns -1: stop), whether the
 * queue is not shown (0), or shown (1, *shown = the client's name,
 * borrowed from stored). node_access_list_end frees what begin loaded.
 * begin: 0, TERN_EBADNAME, -ENOMEM. */
struct node_access_list;
int node_access_list_begin(struct node_access *a,
                           const struct node_principal *p,
                           struct idx_env *e,
                           const char *after,
                           size_t len,
                           char *out,
                           struct node_access_list **l);
int node_access_list_show(struct node_access_list *l,
                          const char *stored,
                          const char **shown);
void node_access_list_end(struct node_access_list *l);

/* PRODUCE with producer id pid (not 0): 0 when p may use it (docs/AUTH.md
 * "Producer ids"), TERN_EDENIED with errmsg otherwise. */
int node_access_producer(struct node_access *a,
                         struct node_principal *p,
                         struct idx_env *e,
                         uint64_t pid,
                         char *errmsg);

/* Charge bytes of a PRODUCE to p's namespace's produce rate at now_ms
 * (monotonic): 0, or TERN_ETHROTTLED with errmsg giving the wait. */
int node_access_rate(struct node_access *a,
                     const struct node_principal *p,
                     struct idx_env *e,
                     uint64_t bytes,
                     uint64_t now_ms,
                     char *errmsg);

/* Buckets held (tests: deleted namespaces' buckets are dropped). */
unsigned node_access_rate_buckets(const struct node_access *a);

/* Login bounds (docs/AUTH.md "Login bounds"). ip: IPv4 source address,
 * network order; now_ms: monotonic. node_access_login_allowed, before an
 * AUTH_START: 0, or TERN_ETHROTTLED with errmsg giving the seconds to
 * wait, when ip had auth_failures_per_minute failed logins in its current
 * one-minute window. node_access_login_failed counts one failed login of
 * ip (forgetting the address with the oldest window when the table holds
 * auth_failure_sources already). node_access_login_sources: addresses
 * counted now. */
int node_access_login_allowed(struct node_access *a,
                              uint32_t ip,
                              uint64_t now_ms,
                              char *errmsg);
void node_access_login_failed(struct node_access *a,
                              uint32_t ip,
                              uint64_t now_ms);
unsigned node_access_login_sources(const struct node_access *a);

#endif /* TERN_NODE_ACCESS_H */
