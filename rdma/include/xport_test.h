/*
 * rdma/: the test-only part of the transport interface (see xport.h for
 * the rest): the in-process mem backend and its network controls, direct
 * epoch/fence setters of the ring backends, and the fallback composite's
 * per-peer path state. Nothing in node/ or raft/ calls these; unit and
 * hardware tests do.
 */
#ifndef TERN_XPORT_TEST_H
#define TERN_XPORT_TEST_H

#include <stddef.h>
#include <stdint.h>

struct xport;

/*
 * ---- mem backend (rdma/mem.c) ----------------------------------------------
 * A deterministic in-process network for tests. Nothing happens unless the
 * test calls the stepping functions below; no loop is needed. Send
 * callbacks are deferred until xport_mem_net_complete(). mem has no
 * epochs (set_epoch/set_fence accept and ignore), does not poll
 * (xport_set_busy_poll returns 0) and keeps no counters.
 */
struct xport_mem_net;
int xport_mem_net_new(struct xport_mem_net **out);
/* All transports of the net must have been closed first. */
void xport_mem_net_free(struct xport_mem_net *net);
int xport_mem_new(struct xport_mem_net *net,
                  uint64_t self_id,
                  struct xport **out);
/* Link from->to up (1) or down (0). Sends on a down link complete with
 * TERN_ENOCONN; messages already queued on it are dropped. */
void xport_mem_net_set_link(struct xport_mem_net *net,
                            uint64_t from,
                            uint64_t to,
                            int up);
/* Number of messages queued from->to (0 = any id for from or to). */
size_t xport_mem_net_pending(struct xport_mem_net *net,
                             uint64_t from,
                             uint64_t to);
/* Deliver up to n queued messages from->to in order (0 = any id). Returns
 * how many were delivered. Receivers' recv callbacks run inside. */
size_t xport_mem_net_deliver(struct xport_mem_net *net,
                             uint64_t from,
                             uint64_t to,
                             size_t n);
/* Drop up to n queued messages from->to. Returns how many were dropped. */
size_t xport_mem_net_drop(struct xport_mem_net *net,
                          uint64_t from,
                          uint64_t to,
                          size_t n);
/* Fire every deferred send callback. Returns how many fired. */
size_t xport_mem_net_complete(struct xport_mem_net *net);
/* Give to's transport the peer-down signal for from (xport.h), as a
 * kernel closing a dead process's connections would; runs to's callback
 * inside. Returns 1 if to had a callback to run, else 0. */
int xport_mem_net_peer_down(struct xport_mem_net *net,
                            uint64_t from,
                            uint64_t to);

/*
 * ---- ring backends: epoch and fence of one backend --------------------------
 * xport_set_epoch/xport_set_fence for an shm (resp. verbs) transport, and
 * TERN_EINVAL for any other: every record this node writes carries epoch;
 * records arriving below the fence are consumed and dropped, never
 * delivered; both apply at once to existing and future connections.
 */
int xport_shm_set_epoch(struct xport *x, uint64_t epoch);
int xport_shm_set_fence(struct xport *x, uint64_t fence);
#ifdef TERN_HAVE_VERBS
int xport_verbs_set_epoch(struct xport *x, uint64_t epoch);
int xport_verbs_set_fence(struct xport *x, uint64_t fence);
#endif

/*
 * ---- fallback composite ----------------------------------------------------
 * 1 if peer_id's next send goes over the fast path, 0 if over the slow
 * one (after a failure, while probing, or no fast address), -ENOENT for a
 * peer never sent to, TERN_EINVAL if x is not a fallback transport.
 */
int xport_fallback_peer_fast(const struct xport *x, uint64_t peer_id);

#endif /* TERN_XPORT_TEST_H */
