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

#endif /* TERN_NODE_NODE_H */
