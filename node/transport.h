/*
 * The raft transport of a node (transport.c): which rdma/ backend the
 * configuration selects (tcp, shm or verbs behind the tcp fallback), how
 * the peers' fast addresses are derived, busy-polling, and the counters
 * of the shutdown "replication stages" line. Only transport.c knows the
 * fallback composite's children. Private to node/.
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
    struct xport *fast;            /* the fallback's fast child, or NULL */
    struct xport *tcp;             /* tcp (the fallback's child, if any) */
    bool fast_is_shm;              /* fast is shm (else verbs) */
    char name[32];      /* "tcp", "shm+tcp", "verbs+tcp"; before start:
                           the requested one */
    char requested[16]; /* "tcp" | "shm" | "rdma" | "auto" */
};

/* The fast backend's and the fallback's counters (0 where a backend does
 * not count): shm doorbells, wake-ups and busy-poll rounds, verbs
 * doorbells and busy-poll rounds, sends per path and path switches. */
struct node_xport_counters
{
    uint64_t doorbells;
    uint64_t wakeups;
    uint64_t spins;
    uint64_t spin_hits;
    uint64_t spin_ns;
    uint64_t fast_sends;
    uint64_t slow_sends;
    uint64_t to_slow;
    uint64_t to_fast;
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
/* Busy-poll up to us microseconds (0: off) on the backend that carries
 * the traffic: the fast child of a fallback, else tcp. */
int node_transport_set_busy_poll(struct node_transport *t, unsigned us);
/* OUT: the counters (caller-owned; zeroed first). */
void node_transport_counters(const struct node_transport *t,
                             struct node_xport_counters *out);
/* Close the transport; cb(arg) runs once it is closed. Returns false,
 * and cb never runs, when there is nothing to close. */
bool node_transport_close(struct node_transport *t,
                          void (*cb)(void *arg),
                          void *arg);

#endif /* TERN_NODE_TRANSPORT_H */
