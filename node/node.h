/*
 * One ternd node (node.c): the wiring of the transport, raft, the index
 * and the client server on one libuv loop, and its lifecycle from start
 * to shutdown. Private to node/.
 */
#ifndef TERN_NODE_NODE_H
#define TERN_NODE_NODE_H

#include "config.h"

/* Run a node until it is stopped by SIGTERM/SIGINT. Returns the process
 * exit code. c is borrowed until the call returns. */
int node_run(const struct node_config *c);

/* Settle [raft] log_store = auto (the default) from DATA_DIR/raft before
 * anything opens it: the store whose files it holds (raft_uv's metadata1,
 * metadata2, open-N, START-END or snapshot-* files; tern's seg-, free- or
 * snap- files), tern's for a directory with neither (a new node, a
 * restore). Sets c->tern_log_store and c->log_store_why (also for a store
 * set in the config). 0, or TERN_EINVAL with errmsg when the directory
 * holds files of both stores. */
int node_pick_log_store(struct node_config *c, char *errmsg);

#endif /* TERN_NODE_NODE_H */
