/*
 * ternd's service manager notifications (notify.c): sd_notify(3) messages
 * for a systemd unit of Type=notify. Each call does nothing when the
 * process was not started with NOTIFY_SOCKET set. Private to node/.
 */
#ifndef TERN_NODE_NOTIFY_H
#define TERN_NODE_NOTIFY_H

#include <stdint.h>

/* READY=1 with a STATUS line naming client_addr (borrowed): raft has
 * started and the client port accepts connections. */
void node_notify_ready(const char *client_addr);
/* STOPPING=1: shutdown has begun. */
void node_notify_stopping(void);
/* STATUS=<role> term <term>[, writable]: role is borrowed. */
void node_notify_role(const char *role, uint64_t term, int writable);

#endif /* TERN_NODE_NOTIFY_H */
