/*
 * The raft transport of a node (transport.c): which rdma/ backend the
 * configuration selects (tcp, shm or verbs behind the tcp fallback), how
 * the peers' fast addresses are derived, busy-polling, and the counters
 * of the shutdown "replication stages" line, through the transport
 * interface only (the fallback composite forwards to its children).
 * Private to node/.
 */
#ifndef TERN_NODE_TRANSPORT_H
#define TERN_NODE_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "config.h"
#include "xport.h"

struct node_transport
{
    const struct node_config *cfg; /* borrowed */
    uv_loop_t *loop;               /* borrowed */
    struct xport *xport;           /* what raft uses; owned */
    bool fast_is_shm;   /* the fallback's fast child is shm (else verbs) */
    char name[32];      /* "tcp", "shm+tcp", "verbs+tcp"; before start:
                           the requested one */
    char requested[16]; /* "tcp" | "shm" | "rdma" | "auto" */
    /* peer_auth = tls: the tcp transport's contexts (owned; freed once
     * the transport is closed, which borrows them) */
    struct auth_tls_ctx *tls_server;
    struct auth_tls_ctx *tls_client;
    void (*close_cb)(void *arg);
    void *close_arg;
};

/* Set t up for requested ("tcp" | "shm" | "rdma" | "auto", copied); no
 * transport exists yet. loop and cfg are borrowed for t's lifetime. */
void node_transport_init(struct node_transport *t,
                         uv_loop_t *loop,
                         const struct node_config *cfg,
                         const char *requested);
/* Create t->xport as requested (config.c documents the choices) and set
 * t->name to the selection. On failure whatever exists is left for
 * node_transport_close. 0, or a code with errmsg. */
int node_transport_start(struct node_transport *t, char *errmsg);
/* Busy-poll up to us microseconds (0: off) after each send
 * (xport_set_busy_poll; a fallback composite forwards it to both
 * children). 0 or a code. */
int node_transport_set_busy_poll(struct node_transport *t, unsigned us);
/* Adaptive polling with a cap of us microseconds (0: off)
 * (xport_set_adaptive_poll; a composite forwards it to both children).
 * 0 or a code. */
int node_transport_set_adaptive_poll(struct node_transport *t, unsigned us);
/* OUT: the transport's counters (xport_get_stats: a composite sums its
 * children's and adds its own); caller-owned, zeroed first. */
void node_transport_stats(const struct node_transport *t,
                          struct xport_stats *out);
/* Close the transport; cb(arg) runs once it is closed (and its TLS
 * contexts are freed). Returns false, and cb never runs, when there is
 * nothing to close (the TLS contexts, if any, are freed at once). */
bool node_transport_close(struct node_transport *t,
                          void (*cb)(void *arg),
                          void *arg);

#endif /* TERN_NODE_TRANSPORT_H */
