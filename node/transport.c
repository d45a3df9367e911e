/*
 * The raft transport of a node: which rdma/ backend carries the raft
 * traffic, selected by --transport (config.c documents the choices).
 *
 * tcp is xport_tcp on raft_addr; shm and rdma are rdma/fallback.c
 * composites of the fast backend (shm on
 * <shm_dir>/tern-shm-<host>-<port>.sock, or verbs on raft_addr) and tcp on
 * raft_addr, with the peers' fast addresses derived from their raft
 * addresses by the same rule (fast_address); auto is rdma when a device
 * exists and the verbs listener comes up, else tcp. t->name is the real
 * selection ("tcp", "shm+tcp", "verbs+tcp"), which the node shows as its
 * transport in the status answer.
 *
 * Peer authentication ([security] peer_auth): with tls, the tcp transport
 * (alone, or the slow child of a composite) runs mutual TLS with two
 * contexts made from cluster_ca, node_cert and node_key (rdma/tcp.c,
 * "TLS"); with none it runs in plaintext.
 * shm with peer_auth = tls: the shm handshake proves the cluster secret
 * (rdma/shm.c): the one the node loaded from cluster_secret_file at start
 * (cfg->cluster_secret, borrowed), which xport_shm_new copies.
 * The verbs transport, likewise, gets the cluster secret (cluster_secret)
 * and exposes its rings only to peers that prove it.
 *
 * Busy-polling (node_transport_set_busy_poll, on every change of raft
 * role), adaptive polling (node_transport_set_adaptive_poll, likewise) and the
 * counters of the shutdown line (node_transport_stats) go through the transport
 * interface; the fallback composite forwards them to its children, so node/
 * never reaches into them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <auth.h>
#include <tern_common.h>

#include "log.h"
#include "transport.h"

void node_transport_init(struct node_transport *t,
                         uv_loop_t *loop,
                         const struct node_config *cfg,
                         const char *requested)
{
    memset(t, 0, sizeof(*t));
    t->loop = loop;
    t->cfg = cfg;
    (void)snprintf(t->requested, sizeof(t->requested), "%s", requested);
    (void)snprintf(t->name, sizeof(t->name), "%s", requested);
}

/* The shm socket of the node whose raft address is raft_addr
 * ("host:port" -> <shm_dir>/tern-shm-<host>-<port>.sock). Returns 0,
 * TERN_EINVAL, or -ENAMETOOLONG when it does not fit a unix socket path. */
static int shm_socket_path(const char *shm_dir,
                           const char *raft_addr,
                           char *out,
                           size_t cap)
{
    const char *colon = strrchr(raft_addr, ':');
    int k;
    if (colon == NULL) {
        return TERN_EINVAL;
    }
    k = snprintf(out, cap, "%s/tern-shm-%.*s-%s.sock", shm_dir,
                 (int)(colon - raft_addr), raft_addr, colon + 1);
    if (k < 0 || (size_t)k >= cap || (size_t)k >= 108) {
        return -ENAMETOOLONG;
    }
    return 0;
}

/* xport_fallback_options.fast_address: a peer's fast address from its raft
 * address, by the rule its own node uses to listen. */
static int fast_address(void *arg,
                        uint64_t peer_id,
                        const char *slow_address,
                        char *out,
                        size_t cap)
{
    struct node_transport *t = arg;
    size_t len = strlen(slow_address);
    (void)peer_id;
    if (t->fast_is_shm) {
        return shm_socket_path(t->cfg->shm_dir, slow_address, out, cap);
    }
    /* verbs: the raft address itself, in rdma_cm's port space. */
    if (len >= cap) {
        return -ENAMETOOLONG;
    }
    memcpy(out, slow_address, len + 1);
    return 0;
}

/* Wrap t->xport (tcp, owned by t) and fast into a fallback composite. On
 * failure fast is closed and t->xport stays the tcp transport
 * (node_transport_close closes it). */
static int wrap_fallback(struct node_transport *t,
                         struct xport *fast,
                         char *errmsg)
{
    struct xport_fallback_options fo;
    struct xport *fb = NULL;
    int rv;

    memset(&fo, 0, sizeof(fo));
    t->fast_is_shm = strcmp(xport_name(fast), "shm") == 0;
    /* shm: a failed fast send at start-up (the peer's socket not there
     * yet) kept that peer on tcp for a whole second (seen in
     * bench/replication.sh --stages: ~1500 AppendEntries over tcp after
     * "cluster up"); a probe is one unix-socket connect, so retry sooner.
     * verbs keeps 1 s (an rdma_cm connect is dearer). */
    fo.retry_ms = t->fast_is_shm ? 200 : 1000;
    fo.fast_address = fast_address;
    fo.fast_address_arg = t;
    rv = xport_fallback_new(t->loop, fast, t->xport, &fo, &fb, errmsg);
    if (rv != 0) {
        xport_close(fast, NULL, NULL);
        return rv;
    }
    t->xport = fb;
    (void)snprintf(t->name, sizeof(t->name), "%s", xport_name(fb));
    return 0;
}

/* The cluster secret of the shm and verbs handshakes: the node's
 * (borrowed from the configuration view). Only with peer_auth = tls; NULL
 * with errmsg when the node has none. */
static const struct auth_secret *cluster_secret(const struct node_config *c,
                                                char *errmsg)
{
    if (c->cluster_secret == NULL) {
        tern_errmsg_printf(errmsg,
                           "peer_auth = tls needs [security] "
                           "cluster_secret_file (shm and rdma handshakes)");
    }
    return c->cluster_secret;
}

/* Smallest power of two ring (at least 8 MiB) that carries an entry of
 * max_message_bytes plus framing in one message; larger messages go over
 * tcp (rdma/fallback.c). */
static size_t shm_ring_bytes(const struct node_config *c)
{
    size_t want = 2 * ((size_t)c->max_message_bytes + NODE_FRAME_OVERHEAD +
                       ((size_t)64 << 10));
    size_t ring = (size_t)8 << 20;
    while (ring < want && ring < ((size_t)1 << 30)) {
        ring <<= 1;
    }
    return ring;
}

/* The TLS server and client contexts of this node (t->tls_server,
 * t->tls_client) from its [security] files. 0 or a code with errmsg. */
static int tls_contexts(struct node_transport *t, char *errmsg)
{
    const struct node_config *c = t->cfg;
    struct auth_tls_ctx_options o;
    int rv;

    memset(&o, 0, sizeof(o));
    o.cert_file = c->node_cert;
    o.key_file = c->node_key;
    o.ca_file = c->cluster_ca;
    o.require_peer_cert = true;
    o.role = AUTH_TLS_SERVER;
    rv = auth_tls_ctx_new(&o, &t->tls_server, errmsg);
    if (rv == 0) {
        o.role = AUTH_TLS_CLIENT;
        rv = auth_tls_ctx_new(&o, &t->tls_client, errmsg);
    }
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "peer_auth = tls");
    }
    return rv;
}

int node_transport_start(struct node_transport *t, char *errmsg)
{
    const char *want = t->requested;
    const struct node_config *c = t->cfg;
    struct xport_tcp_options xo;
    struct xport *fast = NULL;
    int devices;
    int rv;

    memset(&xo, 0, sizeof(xo));
    xo.handshake_timeout_ms = c->peer_handshake_timeout_ms;
    xo.max_pending_inbound = c->peer_max_pending;
    if (c->peer_auth == NODE_PEER_AUTH_TLS) {
        rv = tls_contexts(t, errmsg);
        if (rv != 0) {
            return rv;
        }
        xo.tls_server = t->tls_server;
        xo.tls_client = t->tls_client;
    }
    rv = xport_tcp_new(t->loop, c->id, c->raft_addr, &xo, &t->xport, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "raft transport on %s", c->raft_addr);
        return rv;
    }
    (void)snprintf(t->name, sizeof(t->name), "tcp");
    if (strcmp(want, "shm") == 0) {
        struct xport_shm_options so;
        char path[128];
        rv = shm_socket_path(c->shm_dir, c->raft_addr, path, sizeof(path));
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "shm socket path for %s in %s: %s",
                               c->raft_addr, c->shm_dir, tern_strerror(rv));
            return rv;
        }
        memset(&so, 0, sizeof(so));
        so.ring_bytes = shm_ring_bytes(c);
        so.handshake_timeout_ms = c->peer_handshake_timeout_ms;
        so.max_pending = c->peer_max_pending;
        if (c->peer_auth == NODE_PEER_AUTH_TLS) {
            so.secret = cluster_secret(c, errmsg);
            if (so.secret == NULL) {
                tern_errmsg_wrapf(errmsg, "shm transport");
                return TERN_EINVAL;
            }
        }
        rv = xport_shm_new(t->loop, c->id, path, &so, &fast, errmsg);
        if (rv != 0) {
            tern_errmsg_wrapf(errmsg, "shm transport on %s", path);
            return rv;
        }
        node_log(NODE_LOG_INFO, "shm transport listening",
                 "path=%s ring_bytes=%zu auth=%s", path, so.ring_bytes,
                 so.secret != NULL ? "cluster-secret" : "none");
        return wrap_fallback(t, fast, errmsg);
    }
    if (strcmp(want, "rdma") != 0 && strcmp(want, "auto") != 0) {
        return 0;
    }
    devices = xport_rdma_device_count();
#ifdef TERN_HAVE_VERBS
    if (devices > 0) {
        struct xport_verbs_options vo;
        char verrmsg[TERN_ERRMSG_SIZE] = "";
        memset(&vo, 0, sizeof(vo));
        vo.ring_bytes = shm_ring_bytes(c);
        vo.max_pending_auth = c->peer_max_pending;
        if (c->peer_auth == NODE_PEER_AUTH_TLS) {
            vo.secret = cluster_secret(c, errmsg); /* copied */
            if (vo.secret == NULL) {
                return TERN_EINVAL;
            }
        }
        rv = xport_verbs_new(t->loop, c->id, c->raft_addr, &vo, &fast, verrmsg);
        if (rv == 0) {
            node_log(NODE_LOG_INFO, "verbs transport listening",
                     "addr=%s devices=%d", c->raft_addr, devices);
            return wrap_fallback(t, fast, errmsg);
        }
        if (strcmp(want, "rdma") == 0) {
            tern_errmsg_printf(errmsg, "rdma transport on %s: %s", c->raft_addr,
                               verrmsg);
            return rv;
        }
        node_log(NODE_LOG_WARN, "rdma unavailable, using tcp",
                 "transport=auto detail=\"%s\"", verrmsg);
        return 0;
    }
#endif
    if (strcmp(want, "rdma") == 0) {
#ifdef TERN_HAVE_VERBS
        tern_errmsg_printf(errmsg,
                           "transport rdma: no RDMA device found (use "
                           "--transport tcp, shm or auto)");
#else
        tern_errmsg_printf(errmsg,
                           "transport rdma: ternd was built without "
                           "libibverbs/librdmacm (use --transport tcp, shm "
                           "or auto)");
#endif
        return -ENODEV;
    }
    node_log(NODE_LOG_INFO, "no RDMA device, using tcp",
             "transport=auto devices=%d", devices);
    return 0;
}

int node_transport_set_busy_poll(struct node_transport *t, unsigned us)
{
    /* The composite forwards to both of its children: the fast path polls
     * its rings or CQs, tcp its sockets while a peer is on it. */
    return t->xport != NULL ? xport_set_busy_poll(t->xport, us) : 0;
}

int node_transport_set_adaptive_poll(struct node_transport *t, unsigned us)
{
    return t->xport != NULL ? xport_set_adaptive_poll(t->xport, us) : 0;
}

void node_transport_stats(const struct node_transport *t,
                          struct xport_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (t->xport != NULL) {
        (void)xport_get_stats(t->xport, out);
    }
}

static void free_tls(struct node_transport *t)
{
    auth_tls_ctx_free(t->tls_server);
    auth_tls_ctx_free(t->tls_client);
    t->tls_server = NULL;
    t->tls_client = NULL;
}

static void on_xport_closed(void *arg)
{
    struct node_transport *t = arg;
    free_tls(t); /* the transport borrowed them until now */
    if (t->close_cb != NULL) {
        t->close_cb(t->close_arg);
    }
}

bool node_transport_close(struct node_transport *t,
                          void (*cb)(void *arg),
                          void *arg)
{
    struct xport *x = t->xport;
    if (x == NULL) {
        free_tls(t);
        return false;
    }
    t->xport = NULL;
    t->close_cb = cb;
    t->close_arg = arg;
    xport_close(x, on_xport_closed, t);
    return true;
}
