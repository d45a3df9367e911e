/*
 * rdma/: tern's message transports between cluster nodes (prefix xport_).
 *
 * A transport moves opaque, self-contained messages (byte strings) between
 * node ids. It knows nothing about Raft: raft/ encodes Raft messages with its
 * own codec and hands the bytes here. Backends:
 *   - tcp:  libuv TCP streams, one outbound connection per peer (rdma/tcp.c);
 *   - shm:  one-sided ring protocol (rdma/ring.c) over memfd rings mapped
 *           by the peer process, eventfd doorbell (rdma/shm.c);
 *   - verbs: the same ring protocol over RC QPs, RDMA_WRITE_WITH_IMM into
 *           registered rings, rdma_cm setup (rdma/verbs.c, verbs_cm.c;
 *           needs an RDMA device: tested on soft-RoCE by tests/rxe/run.sh);
 *     shm and verbs share one driver (rdma/ringx.c) for peers, queues and
 *     delivery;
 *   - fallback: a fast backend (shm, verbs) with tcp per peer
 *           (rdma/fallback.c);
 *   - mem:  in-process, manually stepped network for deterministic tests
 *           (rdma/mem.c; declared in xport_test.h with the other test-only
 *           controls).
 *
 * Contract (every backend):
 *   - xport_send() copies/encodes the message synchronously: the caller's
 *     iov buffers are borrowed only for the duration of the call.
 *   - If xport_send() returns non-zero, cb is never called. If it returns 0,
 *     cb fires exactly once, later (never from inside xport_send), with 0
 *     ("handed off": not a delivery guarantee) or a negative code
 *     (TERN_ENOCONN, TERN_EBUSY when the per-peer queue is full,
 *     TERN_ECANCELED at close).
 *   - Messages from one sender to one receiver arrive in order or not at all
 *     (a reconnect may drop messages; callers must tolerate loss).
 *   - Per-peer queued bytes are bounded; the bound is the backend's option.
 *   - All callbacks run on the loop thread that owns the transport.
 */
#ifndef TERN_XPORT_H
#define TERN_XPORT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct xport;
struct xport_send;

typedef void (*xport_send_cb)(struct xport_send *req, int status);
/* msg is borrowed: valid only during the call. */
typedef void (*xport_recv_cb)(void *arg,
                              uint64_t from_id,
                              const void *msg,
                              size_t len);
typedef void (*xport_close_cb)(void *arg);

/* Caller-allocated send request; must stay valid until cb fires. */
struct xport_send
{
    void *data;       /* free for the caller */
    xport_send_cb cb; /* set by xport_send */
    unsigned flags;   /* XPORT_SEND_*: set by xport_send (0) and
                       * xport_send_flags */
    void *priv[4];    /* backend's private use */
};

/* Send flags: hints a backend may use and otherwise ignores.
 * XPORT_SEND_XXH3: the peer decodes frames checksummed with XXH3 (tcp:
 * frame version 2); without it the tcp backend writes version 1, which
 * every build decodes. */
#define XPORT_SEND_XXH3 1u

struct xport_iov
{
    const void *base;
    size_t len;
};

struct auth_tls_ctx;

/* tcp options. Mutual TLS (rdma/tcp.c, "TLS"): with tls_server and
 * tls_client set, every connection runs TLS 1.3; the connecting side is
 * the TLS client (tls_client: role AUTH_TLS_CLIENT with this node's
 * certificate) and requires the server's certificate CN to be
 * "node-<id it dialed>"; the accepting side is the TLS server
 * (tls_server: role AUTH_TLS_SERVER, require_peer_cert) and requires the
 * HELLO's sender id to be the id in the client certificate's CN
 * "node-<id>". Both NULL: plaintext (peer_auth none). Both contexts are
 * borrowed: they must outlive the transport. */
struct xport_tcp_options
{
    size_t max_message;              /* largest message accepted; 0 = 256 MiB */
    size_t max_queued_bytes;         /* per peer; 0 = 64 MiB */
    unsigned connect_retry_ms;       /* reconnect back-off; 0 = 100 */
    struct auth_tls_ctx *tls_server; /* accepting side, or NULL */
    struct auth_tls_ctx *tls_client; /* connecting side, or NULL */
    unsigned handshake_timeout_ms;   /* an inbound connection that has not
                                      * finished TLS and HELLO by then is
                                      * closed; so is an outbound one whose
                                      * TLS handshake has not finished that
                                      * long after connecting; 0 = 5000 */
    unsigned max_pending_inbound;    /* inbound connections still in TLS or
                                      * waiting for HELLO; more are closed
                                      * at once; 0 = 64 */
};

/* Create a TCP transport listening on bind_address ("host:port").
 * *out is owned by the caller, released by xport_close. TERN_EINVAL when
 * only one of tls_server/tls_client is set. */
int xport_tcp_new(uv_loop_t *loop,
                  uint64_t self_id,
                  const char *bind_address,
                  const struct xport_tcp_options *opts,
                  struct xport **out,
                  char *errmsg);

/* Start delivering received messages to cb. */
int xport_start(struct xport *x, xport_recv_cb cb, void *arg);

/* Send the concatenation of iov[0..n) to peer_id at peer_address (the
 * peer's listen address, as configured). See the contract above. */
int xport_send(struct xport *x,
               struct xport_send *req,
               uint64_t peer_id,
               const char *peer_address,
               const struct xport_iov *iov,
               unsigned n,
               xport_send_cb cb);

/* xport_send with flags (XPORT_SEND_*) for this send. */
int xport_send_flags(struct xport *x,
                     struct xport_send *req,
                     uint64_t peer_id,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n,
                     unsigned flags,
                     xport_send_cb cb);

/* Largest message this transport carries in one xport_send. */
size_t xport_max_message(const struct xport *x);

/* Backend name: "tcp", "mem", "shm", "verbs", or "<fast>+<slow>" for
 * the fallback composite (valid while x lives). */
const char *xport_name(const struct xport *x);

/* Fencing. The sender stamps its epoch (the Raft term it acts
 * in) on everything it writes; a receiver holding fence F refuses writes
 * whose epoch is below F (the NIC refuses them on verbs, the receiver drops
 * them on shm). Raft sets the epoch and the fence to the current term on
 * every term change, so a deposed leader's late one-sided writes cannot
 * land. Backends without epochs (tcp, mem) accept and ignore both: there
 * the term check inside every Raft message is the fence. */
int xport_set_epoch(struct xport *x, uint64_t epoch);
int xport_set_fence(struct xport *x, uint64_t fence);

/* Peer-down signal. cb(arg, peer_id) runs on the loop thread when an
 * established connection with peer_id (either direction) breaks for a
 * reason this node did not choose: EOF, a reset, a failed read or write.
 * A killed process's sockets are closed by its kernel at once, so this is
 * the earliest sign a peer died; it is only a hint (a reset connection
 * to a live peer gives it too, and a host that vanishes silently gives
 * none until TCP's timeouts). Several may come for one failure (one per
 * connection). Never from inside xport_send, never after xport_close.
 * tcp, shm and verbs report it; the fallback composite passes its two
 * backends' on; mem reports what the test injects
 * (xport_mem_net_peer_down). cb NULL: off (the default). arg is
 * borrowed until xport_close. */
typedef void (*xport_peer_down_cb)(void *arg, uint64_t peer_id);
void xport_set_peer_down(struct xport *x, xport_peer_down_cb cb, void *arg);

/* Busy-polling: after a send, keep the loop polling for the answer for
 * up to us microseconds instead of sleeping until a wake-up (how each
 * backend polls: its section below). us = 0 (the default): off. Costs up
 * to us of CPU per round: meant for a node that expects answers soon (a
 * Raft leader). tcp, shm and verbs poll; the fallback composite passes us
 * to both of its backends; a backend that does not poll (mem) returns 0
 * and does nothing. Returns 0, or TERN_EINVAL (x is NULL). */
int xport_set_busy_poll(struct xport *x, unsigned us);

/* Adaptive polling: spin for what comes back only while the recent
 * exchanges came back soon, at most us microseconds per send (the policy:
 * rdma/adapt.c). A leader spins from its send to the first answer; a
 * follower under steady load wakes itself (a timer) shortly before the
 * next AppendEntries is due and spins until it lands; an idle node, or
 * one whose peers answer late, sleeps. us = 0 (the default): off. While
 * busy-polling is on (xport_set_busy_poll), it takes precedence. tcp and
 * shm poll this way; the fallback composite passes us to both of its
 * backends; other backends (mem, verbs) return 0 and do nothing. Returns
 * 0, or TERN_EINVAL (x is NULL). */
int xport_set_adaptive_poll(struct xport *x, unsigned us);

/* Counters since creation, for diagnostics (node/ logs them at shutdown).
 * A backend fills in the ones it keeps and leaves the others 0; the
 * fallback composite reports the sum of its two backends' counters plus
 * its own path counters. */
#define XPORT_REFUSAL_MAX 160
struct xport_stats
{
    uint64_t doorbells;     /* wake-ups rung at peers (shm: eventfd writes;
                             * verbs: RDMA_WRITE_WITH_IMM doorbells) */
    uint64_t wakeups;       /* own doorbell wake-ups handled (shm) */
    uint64_t spins;         /* busy-poll rounds (tcp, shm: one per armed
                             * round; verbs: one per CQ poll from idle) */
    uint64_t spin_hits;     /* of which found what they waited for */
    uint64_t spin_ns;       /* time spent spinning (shm) */
    uint64_t credit_waits;  /* sends that found the peer's ring full (shm,
                             * verbs) */
    uint64_t fenced;        /* inbound records dropped by the fence */
    uint64_t corrupt;       /* inbound rings torn down: invalid record */
    uint64_t fast_sends;    /* fallback: sends handed to the fast backend
                             * (probes included) */
    uint64_t slow_sends;    /* fallback: sends handed to the slow backend
                             * (re-sent probes included) */
    uint64_t fast_failures; /* fallback: fast sends that failed */
    uint64_t to_slow;       /* fallback: switches of a peer fast -> slow */
    uint64_t probes;        /* fallback: probes of the fast path */
    uint64_t to_fast;       /* fallback: successful probes (slow -> fast) */
    uint64_t auth_refused;  /* inbound or outbound connections closed
                             * because the other side did not prove
                             * cluster membership (tcp: TLS handshake or
                             * certificate; shm, verbs: the secret's
                             * challenge-response); nothing they sent
                             * was delivered */
    char last_refusal[XPORT_REFUSAL_MAX]; /* why the latest auth_refused
                                           * was counted (tcp: OpenSSL's
                                           * reason, the CN, HELLO,
                                           * timeout), "" if none */
};

/* Fill *out with x's counters. Returns 0, or TERN_EINVAL (NULL
 * argument). */
int xport_get_stats(const struct xport *x, struct xport_stats *out /* OUT */);

/* Stop listening, cancel queued sends (their cb gets TERN_ECANCELED), then
 * call cb(arg) once everything is closed; x is already freed when
 * cb runs. */
void xport_close(struct xport *x, xport_close_cb cb, void *arg);

/*
 * ---- shm backend (rdma/shm.c) --------------------------------------------
 * The one-sided ring transport over shared memory between processes on one
 * host (protocol: rdma/ring.c; files and handshake:
 * rdma/shm.c). A node listens on a unix socket path; that path is its
 * address: peers pass it as peer_address to xport_send. Rings live in
 * sealed memfds exchanged over the socket, so nothing is left in /dev/shm
 * after a crash. With a cluster secret, both ends of a connection prove
 * they hold it (a challenge-response over auth_secret_mac) before any
 * memfd or eventfd crosses the socket; a peer that fails is closed and
 * counted in auth_refused, and nothing it sent is delivered.
 */
struct auth_secret; /* auth/include/auth.h */

struct xport_shm_options
{
    size_t ring_bytes;         /* each inbound ring (one per sending peer):
                                * power of two, 4 KiB..1 GiB; 0 = 8 MiB.
                                * max_message = ring_bytes / 2 - 40; all
                                * nodes of a cluster should use one value */
    size_t max_queued_bytes;   /* per peer, waiting for ring space or for
                                * the connection; 0 = 64 MiB */
    unsigned connect_retry_ms; /* reconnect back-off; 0 = 100 */
    /* The cluster secret (borrowed for the call: xport_shm_new copies it
     * and wipes its copy when the transport is freed). NULL: no
     * authentication, any process that can connect to the socket gets a
     * ring (only for peer_auth = none). Every node of a cluster uses the
     * same secret, or none. */
    const struct auth_secret *secret;
    unsigned handshake_timeout_ms; /* an inbound handshake (accept to the
                                    * sender's proof) or an outbound one
                                    * (connect to the ring) must finish
                                    * within this; 0 = 2000 */
    unsigned max_pending;          /* inbound connections in the handshake
                                    * at once; one more closes the oldest;
                                    * 0 = 32 */
};

/* Create an shm transport listening on the unix socket listen_path (at
 * most 107 bytes; a stale socket file left by a dead process is replaced,
 * a live listener gives -EADDRINUSE). *out is owned by the caller,
 * released by xport_close (which removes the socket file). */
int xport_shm_new(uv_loop_t *loop,
                  uint64_t self_id,
                  const char *listen_path,
                  const struct xport_shm_options *opts,
                  struct xport **out,
                  char *errmsg);

struct xport_shm_stats
{
    uint64_t fenced;       /* inbound records dropped by the fence */
    uint64_t credit_waits; /* sends that found the peer's ring full */
    uint64_t corrupt;      /* inbound rings torn down: invalid record */
    uint64_t doorbells;    /* doorbells rung (eventfd writes to peers) */
    uint64_t wakeups;      /* own doorbell wake-ups handled */
    uint64_t spins;        /* busy-poll rounds (xport_shm_set_busy_poll) */
    uint64_t spin_hits;    /* rounds that found a record */
    uint64_t spin_ns;      /* time spent spinning */
    uint64_t auth_refused; /* connections refused in the handshake (bad
                            * proof, malformed or unexpected message, fds
                            * where none belong, timeout, eviction) */
    uint64_t evicted;      /* of which: pending inbound handshakes closed
                            * to make room (max_pending) */
    uint64_t pending;      /* inbound connections in the handshake now */
};

/* xport_set_busy_poll on shm: after a send, for up to us microseconds,
 * the loop spins on the inbound rings (in a uv_prepare handle, right
 * before it would sleep in poll) instead of sleeping, with the rings
 * marked awake, so a peer answering within that window rings no doorbell
 * and nobody waits for a wake-up. One round per loop iteration that sent
 * something; a round ends at the first record (then delivered from the
 * prepare handle) or at the deadline. Adaptive: after 8 rounds in a row
 * that found nothing, the next 64 sends do not spin. This function is the
 * same for an shm x (else TERN_EINVAL). */
int xport_shm_set_busy_poll(struct xport *x, unsigned us);
/* xport_set_adaptive_poll on shm (rounds as above, planned by
 * rdma/adapt.c). TERN_EINVAL if x is not shm. */
int xport_shm_set_adaptive_poll(struct xport *x, unsigned us);
/* xport_set_busy_poll on tcp: after each send handed to the socket, keep
 * the loop polling (no sleep) for up to us microseconds or until a frame
 * arrives (rdma/tcp.c). This function is the same for a tcp x (else
 * TERN_EINVAL). */
int xport_tcp_set_busy_poll(struct xport *x, unsigned us);
/* xport_set_adaptive_poll on tcp (rounds as above, planned by
 * rdma/adapt.c). TERN_EINVAL if x is not tcp. */
int xport_tcp_set_adaptive_poll(struct xport *x, unsigned us);
/* shm's counters since creation (xport_get_stats reports the generic
 * ones among them). x must be an shm transport (else TERN_EINVAL). */
int xport_shm_stats(const struct xport *x,
                    struct xport_shm_stats *out /* OUT */);

/*
 * ---- verbs backend (rdma/verbs.c, rdma/verbs_cm.c) -------------------------
 * Declared only when tern_rdma was built with libibverbs and librdmacm
 * (TERN_HAVE_VERBS, set by rdma/CMakeLists.txt). The ring protocol of
 * rdma/ring.c over RC QPs set up with rdma_cm. Addresses are "ipv4:port"
 * of an RDMA-capable interface (rdma_cm needs a real bound source IP, not
 * lo); outbound connections use bind_address's IP as their source. The
 * node's loop watches the rdma_cm and completion channel fds. Tests:
 * tests/hw/ (exit 77 without a device), tests/rxe/run.sh (soft-RoCE).
 */
#ifdef TERN_HAVE_VERBS
struct auth_secret; /* <auth.h> */
struct xport_verbs_options
{
    size_t ring_bytes;           /* each inbound ring, as for shm; 0 = 8 MiB
                                  * (max_message = ring_bytes / 2 - 40) */
    size_t max_queued_bytes;     /* per peer; 0 = 64 MiB */
    unsigned connect_retry_ms;   /* back-off after a failed connect; 0 = 100 */
    unsigned connect_timeout_ms; /* resolve + connect bound; 0 = 2000 */
    unsigned ack_timeout;        /* QP ACK timeout exponent (4.096 us * 2^n
                                  * per try, retry_count 6): 0 = 15 (134 ms,
                                  * a dead peer shows within ~1 s) */
    const struct auth_secret *secret; /* the cluster secret (caller-owned,
                                       * copied): no ring address or rkey
                                       * goes to a peer that has not proved
                                       * it (rdma/verbs_cm.c). NULL: no
                                       * authentication (peer_auth = none;
                                       * such a node only talks to nodes
                                       * without a secret) */
    unsigned max_pending_auth;        /* inbound connections that have not
                                       * proved the secret yet; beyond it connect
                                       * requests are refused; 0 = 64. Each is
                                       * closed after connect_timeout_ms */
};
/* Create a verbs transport listening on bind_address. *out is owned by
 * the caller, released by xport_close. -ENODEV/-EADDRNOTAVAIL etc. when
 * no RDMA device serves that address. */
int xport_verbs_new(uv_loop_t *loop,
                    uint64_t self_id,
                    const char *bind_address,
                    const struct xport_verbs_options *opts,
                    struct xport **out,
                    char *errmsg);
/* Fencing on verbs goes beyond dropping records below the fence (as shm
 * does): xport_set_fence also revokes remote write access at the NIC on
 * every inbound QP whose sender has not shown an epoch >= fence, and
 * connects with an epoch below the fence are rejected. */
struct xport_verbs_stats
{
    uint64_t posted;           /* send WRs posted */
    uint64_t signalled;        /* of which signalled (selective) */
    uint64_t doorbells;        /* RDMA_WRITE_WITH_IMM doorbells */
    uint64_t nops;             /* signalled nop writes (completion only) */
    uint64_t wakes;            /* credit writes with a wake-up */
    uint64_t credit_waits;     /* sends that found no ring/SQ room */
    uint64_t delivered;        /* messages delivered */
    uint64_t fenced;           /* inbound records dropped by the fence */
    uint64_t corrupt;          /* inbound rings torn down: invalid record */
    uint64_t revoked;          /* inbound QPs whose remote write was revoked */
    uint64_t rejected;         /* connect requests refused (stale epoch) */
    uint64_t nic_rejects;      /* our writes NAKed by the remote NIC */
    uint64_t retry_errors;     /* our writes timed out (peer gone) */
    uint64_t connects;         /* outbound connections established */
    uint64_t accepts;          /* inbound connections established */
    uint64_t connect_timeouts; /* connects given up after the timeout */
    uint64_t spins;            /* busy-poll rounds (CQ polls from idle) */
    uint64_t spin_hits;        /* of which found completions */
    uint64_t auth_refused;     /* connections closed: the peer did not
                                * prove the secret (or timed out, or
                                * pending ones were at the cap) */
};
/* xport_set_busy_poll on verbs: after a send, poll the CQs on every loop
 * iteration for up to us microseconds, or until a message is delivered,
 * instead of waiting for the completion channel's wake-up. This function
 * is the same for a verbs x (else TERN_EINVAL). */
int xport_verbs_set_busy_poll(struct xport *x, unsigned us);
/* verbs' own counters since creation. x must be a verbs transport (else
 * TERN_EINVAL). */
int xport_verbs_stats(const struct xport *x,
                      struct xport_verbs_stats *out /* OUT */);
#endif

/*
 * ---- fallback composite (rdma/fallback.c) ----------------------------------
 * A transport made of a FAST backend (shm, verbs) and a
 * SLOW one (tcp), chosen per peer: fast while it works, slow after a
 * fast-path failure (TERN_ENOCONN and other connection errors; TERN_EBUSY
 * does not switch), and back to fast after a successful background probe
 * (the first send at least retry_ms after the switch is tried on the fast
 * path; a failed probe is re-sent over slow, so it loses nothing).
 * Messages of one peer may be reordered or lost across a switch (raft
 * tolerates both). Receives from both. Epoch, fence and busy-poll go to
 * both; xport_get_stats sums both backends' counters and its own. Name:
 * "<fast>+<slow>", e.g. "shm+tcp" (valid while the transport lives).
 * Peer addresses: "SLOW|FAST", or a plain SLOW address whose FAST address
 * comes from fast_address (no mapper, or the mapper returns non-zero: that
 * peer uses the slow backend only). Details: top of rdma/fallback.c.
 */
struct xport_fallback_options
{
    unsigned retry_ms; /* back-off before probing the fast path again after
                        * a failure; 0 = 1000 */
    /* Optional: write peer_id's fast address (NUL-terminated, at most cap
     * bytes) for its slow address into out and return 0; non-zero: no
     * fast path for that peer. Called on the first send to a peer and when
     * its address changes. */
    int (*fast_address)(void *arg,
                        uint64_t peer_id,
                        const char *slow_address,
                        char *out,
                        size_t cap);
    void *fast_address_arg;
};

/* Create the composite over fast and slow (both created on loop with the
 * same self id, neither started). On success both are owned by *out:
 * xport_start starts both, xport_close closes both (their pending sends
 * complete with TERN_ECANCELED) and runs cb once both are closed. On
 * failure (TERN_EINVAL, -ENOMEM) fast and slow stay the caller's. opts
 * may be NULL; it is copied. */
int xport_fallback_new(uv_loop_t *loop,
                       struct xport *fast,
                       struct xport *slow,
                       const struct xport_fallback_options *opts,
                       struct xport **out,
                       char *errmsg);

struct xport_fallback_stats
{
    uint64_t fast_sends;    /* sends handed to the fast backend (probes
                             * included) */
    uint64_t slow_sends;    /* sends handed to the slow backend (re-sent
                             * probes included) */
    uint64_t fast_failures; /* fast sends that failed (path failures) */
    uint64_t to_slow;       /* switches of a peer from fast to slow */
    uint64_t probes;        /* probes of the fast path */
    uint64_t to_fast;       /* successful probes: switches back to fast */
};
/* The composite's own counters since creation (also in xport_get_stats).
 * x must be a fallback transport (else TERN_EINVAL). */
int xport_fallback_stats(const struct xport *x,
                         struct xport_fallback_stats *out /* OUT */);
/* 1 if peer_id's next send goes over the fast path, 0 if over the slow
 * one, -ENOENT for a peer never sent to, TERN_EINVAL if x is not a
 * fallback transport (the node's metrics report it per peer; also in
 * xport_test.h). */
int xport_fallback_peer_fast(const struct xport *x, uint64_t peer_id);
/* Number of RDMA devices visible to this process (0 when tern_rdma was
 * built without verbs). */
int xport_rdma_device_count(void);

#endif /* TERN_XPORT_H */
