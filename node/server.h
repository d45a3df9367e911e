/*
 * ternd's client protocol server (server.c) and the view of the node it
 * works with: the configuration, the write batcher and the operations in
 * struct node_server_ops. Private to node/.
 */
#ifndef TERN_NODE_SERVER_H
#define TERN_NODE_SERVER_H

#include <stdbool.h>

#include <uv.h>

#include "batch.h"
#include "config.h"
#include "idx.h"
#include "repl.h"

struct node_server;

/* What the server needs from the node (arg is the node). */
struct node_server_ops
{
    /* The index reads are served from, or NULL while there is none
     * (stopping, a failed reopen). Borrowed for the current callback. */
    struct idx_env *(*idx)(void *arg);
    /* OUT: the raft status (zeroed but for the id when raft is not
     * running). */
    void (*status)(void *arg, struct repl_status *out);
    /* OUT: the replication latency counters (caller-owned; zeroed when
     * raft is not running); reset: start over. */
    void (*latency)(void *arg, struct repl_latency *out, bool reset);
    /* 0, or TERN_EFULL with a message into errmsg while the disk alarm is
     * on. */
    int (*disk_check)(void *arg, char *errmsg);
    /* Membership (raft/repl.h, "Membership"). OUT: the configuration the
     * node knows, out[0..cap) (caller-owned), *n its size (0 when raft
     * is not running). */
    void (*members)(void *arg,
                    struct repl_member *out,
                    unsigned cap,
                    unsigned *n);
    /* Start a MEMBER change (action PROTO_MEMBER_ADD or _REMOVE; the
     * strings are copied, "" for REMOVE): 0 and cb(data, ...) once it
     * ends, or a code and no cb (repl_member_add/_remove). */
    int (*member_change)(void *arg,
                         uint8_t action,
                         uint64_t id,
                         const char *raft_addr,
                         const char *client_addr,
                         unsigned timeout_ms,
                         repl_change_cb cb,
                         void *data);
    /* Member id's client address (for redirects and status), or NULL
     * when unknown; borrowed until the next call of any op. */
    const char *(*client_addr)(void *arg, uint64_t id);
    /* CLUSTER_TRANSFER: start handing leadership to to_id (0: a caught-up
     * voter) as repl_transfer_start does; cb(data, ...) runs once it ends
     * (never when this fails). 0, or a code with errmsg. */
    int (*transfer)(void *arg,
                    uint64_t to_id,
                    repl_transfer_cb cb,
                    void *data,
                    char *errmsg);
    /* OUT: out[REPL_STAGE__COUNT] (caller-owned), the stage breakdown of
     * the replication latency (zeroed when raft is not running); never
     * resets (the latency op's reset covers the stages). May be NULL:
     * STATS then answers no stage. */
    void (*stages)(void *arg, struct repl_latency *out);
};

/* Listen on cfg->client_addr. cfg, batcher and arg are borrowed and must
 * outlive every connection (a connection lives on until its last request
 * is answered); ops is copied. OUT: *out. 0, or a code with errmsg. */
int node_server_new(uv_loop_t *loop,
                    const struct node_config *cfg,
                    struct node_batcher *batcher,
                    const struct node_server_ops *ops,
                    void *arg,
                    struct node_server **out,
                    char *errmsg);
/* Stop accepting, close every connection; cb once all handles closed (s
 * is freed then). */
void node_server_close(struct node_server *s, void (*cb)(void *arg), void *arg);
/* The batcher's respond op: answer w (w->status, w->result) on its
 * connection (w->owner), if that is still open, and drop the request's
 * reference to it. Works after node_server_close. */
void node_server_respond(struct node_wreq *w);
/* Hold every answer per connection until node_server_uncork, which
 * writes each connection's held answers with one write (one seal under
 * client_tls): a flush that answers many requests of a connection costs
 * one syscall, not one per answer. A connection that drains or closes
 * writes what it holds first; at most 256 KiB are held per connection
 * (more is written at once). Pair them within one loop callback. */
void node_server_cork(struct node_server *s);
void node_server_uncork(struct node_server *s);
/* Re-check parked FETCHes after a flush that made new data visible (or a
 * change of leadership). */
void node_server_wake(struct node_server *s);
/* Count requests, errors, produces and connections into m (metrics.h;
 * borrowed until node_server_close; NULL: stop counting). */
struct node_metrics;
void node_server_set_metrics(struct node_server *s, struct node_metrics *m);
/* Resume/stop reading according to the batcher's congestion. */
void node_server_update_reading(struct node_server *s);

#endif /* TERN_NODE_SERVER_H */
