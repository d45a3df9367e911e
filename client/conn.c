/*
 * libtern server connections: "host:port" parsing, non-blocking TCP
 * connect with a deadline, and buffered writes/reads on a socket. The
 * request engine (engine.c) decides when to connect and what to send;
 * this file only moves bytes. Plain POSIX sockets (no libuv: libtern
 * depends only on libc and, for TLS, OpenSSL through auth/).
 *
 * TLS (tern_client_set_tls): once TCP is connected the connection is in
 * state TLS until auth/tls.c's handshake completes (bounded by the same
 * connect timeout, restarted at the TCP connect); the server's
 * certificate must chain to the CA and carry the connected host as an IP
 * SAN (an address) or DNS SAN (a name), so a redirect to another node's
 * address checks that node's name. Frames are then sealed on their way
 * out (cout holds ciphertext not yet sent, at most AUTH_TLS_BUF bytes) and
 * received records are opened into the same input buffer as plaintext.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"

#define TERN__READ_CHUNK ((size_t)65536)

int64_t tern__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = tern_malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int tern__server_init(struct tern__server *s, const char *addr, size_t len)
{
    const char *host;
    size_t host_len;
    const char *colon;
    const char *port;
    size_t port_len;

    memset(s, 0, sizeof *s);
    s->fd = -1;
    tern_wbuf_init(&s->out);
    if (len == 0) {
        return TERN_EINVAL;
    }
    if (addr[0] == '[') {
        const char *rb = memchr(addr, ']', len);
        if (rb == NULL || (size_t)(rb - addr) + 1 >= len || rb[1] != ':') {
            return TERN_EINVAL;
        }
        host = addr + 1;
        host_len = (size_t)(rb - host);
        colon = rb + 1;
    } else {
        colon = NULL;
        for (size_t i = len; i > 0; i--) {
            if (addr[i - 1] == ':') {
                colon = addr + i - 1;
                break;
            }
        }
        if (colon == NULL) {
            return TERN_EINVAL;
        }
        host = addr;
        host_len = (size_t)(colon - addr);
    }
    port = colon + 1;
    port_len = len - (size_t)(port - addr);
    if (host_len == 0 || port_len == 0 || port_len > 5) {
        return TERN_EINVAL;
    }
    {
        unsigned long p = 0;
        for (size_t i = 0; i < port_len; i++) {
            if (port[i] < '0' || port[i] > '9') {
                return TERN_EINVAL;
            }
            p = p * 10 + (unsigned long)(port[i] - '0');
        }
        if (p == 0 || p > 65535) {
            return TERN_EINVAL;
        }
    }
    s->addr = dup_n(addr, len);
    s->host = dup_n(host, host_len);
    s->port = dup_n(port, port_len);
    if (s->addr == NULL || s->host == NULL || s->port == NULL) {
        tern__server_free(s);
        return -ENOMEM;
    }
    return 0;
}

void tern__server_close(struct tern__server *s)
{
    if (s->fd >= 0) {
        close(s->fd);
    }
    auth_tls_free(s->tls);
    s->tls = NULL;
    auth_scram_client_free(s->scram);
    s->scram = NULL;
    s->auth_id = 0;
    s->logged_in = 0;
    s->cout_len = 0;
    s->cout_off = 0;
    s->fd = -1;
    s->state = TERN__CONN_CLOSED;
    s->out.len = 0;
    s->out.err = 0;
    s->out_off = 0;
    s->in_len = 0;
    s->probe_pending = 0;
    s->watch_id = 0;
    s->hello_sent = 0;
    s->xxh3 = 0;
    s->runs = 0;
}

void tern__server_free(struct tern__server *s)
{
    tern__server_close(s);
    tern_wbuf_free(&s->out);
    tern_free(s->in);
    tern_free(s->cout);
    s->cout = NULL;
    tern_free(s->addr);
    tern_free(s->host);
    tern_free(s->port);
    s->in = NULL;
    s->addr = s->host = s->port = NULL;
}

/* TCP is connected: start TLS if the client uses it. */
static int tls_start(struct tern__server *s, int64_t now, int timeout_ms)
{
    struct auth_tls_expect e = {NULL, NULL, NULL};
    struct in6_addr a6;
    int rv;

    if (s->tls_ctx == NULL) {
        s->state = TERN__CONN_READY;
        s->failures = 0;
        return 0;
    }
    if (s->cout == NULL) {
        s->cout = tern_malloc(AUTH_TLS_BUF);
        if (s->cout == NULL) {
            return -ENOMEM;
        }
    }
    if (inet_pton(AF_INET, s->host, &a6) == 1 ||
        inet_pton(AF_INET6, s->host, &a6) == 1) {
        e.ip = s->host;
    } else {
        e.host = s->host;
    }
    rv = auth_tls_new(s->tls_ctx, &e, &s->tls, s->errmsg);
    if (rv != 0) {
        return rv;
    }
    s->state = TERN__CONN_TLS;
    s->connect_deadline = now + timeout_ms;
    return tern__server_handshake(s);
}

/* Send ciphertext from cout; 0 (maybe partial) or an error. */
static int send_cout(struct tern__server *s)
{
    while (s->cout_off < s->cout_len) {
        ssize_t n = send(s->fd, s->cout + s->cout_off,
                         s->cout_len - s->cout_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return 0;
            }
            if (errno == EINTR) {
                continue;
            }
            int rv = -errno;
            tern_errmsg_printf(s->errmsg, "send to %s: %s", s->addr,
                               tern_strerror(rv));
            return rv;
        }
        s->cout_off += (size_t)n;
    }
    s->cout_off = 0;
    s->cout_len = 0;
    return 0;
}

/* Move the session's pending ciphertext into cout (as much as fits). */
static void take_cout(struct tern__server *s)
{
    if (s->cout_off > 0 && s->cout_off == s->cout_len) {
        s->cout_off = s->cout_len = 0;
    }
    if (s->cout_off > 0) {
        memmove(s->cout, s->cout + s->cout_off, s->cout_len - s->cout_off);
        s->cout_len -= s->cout_off;
        s->cout_off = 0;
    }
    s->cout_len += auth_tls_take(s->tls, s->cout + s->cout_len,
                                 AUTH_TLS_BUF - s->cout_len);
}

/* Receive ciphertext and feed it to the session. *got (OUT): bytes
 * received. 0 or an error (TERN_ECLOSED on EOF). */
static int recv_feed(struct tern__server *s, size_t *got)
{
    uint8_t buf[16384];
    size_t room = auth_tls_feed_room(s->tls);
    ssize_t n;
    size_t used = 0;

    *got = 0;
    if (room == 0) {
        return 0;
    }
    for (;;) {
        n = recv(s->fd, buf, TERN_MIN(room, sizeof buf), 0);
        if (n >= 0 || errno != EINTR) {
            break;
        }
    }
    if (n == 0) {
        return TERN_ECLOSED;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        }
        int rv = -errno;
        tern_errmsg_printf(s->errmsg, "recv from %s: %s", s->addr,
                           tern_strerror(rv));
        return rv;
    }
    (void)auth_tls_feed(s->tls, buf, (size_t)n, &used);
    *got = (size_t)n;
    return 0;
}

int tern__server_handshake(struct tern__server *s)
{
    for (int i = 0; i < 64; i++) {
        size_t got = 0;
        int rc = auth_tls_handshake(s->tls);
        int rv;
        take_cout(s);
        rv = send_cout(s);
        if (rc < 0) {
            tern_errmsg_printf(s->errmsg, "TLS with %s refused: %s", s->addr,
                               auth_tls_errmsg(s->tls));
            return TERN_EAUTH;
        }
        if (rv != 0) {
            return rv;
        }
        if (rc == 0) {
            s->state = TERN__CONN_READY;
            s->failures = 0;
            return 0;
        }
        rv = recv_feed(s, &got);
        if (rv == TERN_ECLOSED) {
            /* A server at a connection limit closes without a word:
             * retried like any closed connection. */
            tern_errmsg_printf(s->errmsg,
                               "%s closed the connection during the TLS "
                               "handshake",
                               s->addr);
            return TERN_ECLOSED;
        }
        if (rv != 0 || got == 0) {
            return rv;
        }
    }
    return 0;
}

int tern__server_want_write(const struct tern__server *s)
{
    return s->out.len > s->out_off || s->cout_len > s->cout_off;
}

int tern__server_connect(struct tern__server *s,
                         int64_t now,
                         int timeout_ms,
                         struct auth_tls_ctx *tls)
{
    struct addrinfo hints;
    struct addrinfo *res = NULL;
    int fd = -1;
    int rv;
    int one = 1;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rv = getaddrinfo(s->host, s->port, &hints, &res);
    if (rv != 0) {
        tern_errmsg_printf(s->errmsg, "resolve %s: %s", s->addr,
                           gai_strerror(rv));
        return rv == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
    }
    fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                res->ai_protocol);
    if (fd < 0) {
        rv = -errno;
        tern_errmsg_printf(s->errmsg, "socket: %s", tern_strerror(rv));
        goto err_after_getaddrinfo;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->tls_ctx = tls;
    s->connect_timeout_ms = timeout_ms;
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        s->state = TERN__CONN_READY; /* tls_start below */
    } else if (errno == EINPROGRESS) {
        s->state = TERN__CONN_CONNECTING;
        s->connect_deadline = now + timeout_ms;
    } else {
        rv = -errno;
        tern_errmsg_printf(s->errmsg, "connect %s: %s", s->addr,
                           tern_strerror(rv));
        goto err_after_socket;
    }
    freeaddrinfo(res);
    s->fd = fd;
    s->out.len = 0;
    s->out_off = 0;
    s->in_len = 0;
    if (s->state == TERN__CONN_READY) {
        return tls_start(s, now, timeout_ms);
    }
    return 0;

err_after_socket:
    close(fd);
err_after_getaddrinfo:
    freeaddrinfo(res);
    return rv;
}

int tern__server_finish_connect(struct tern__server *s, int64_t now)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
    }
    if (err != 0) {
        tern_errmsg_printf(s->errmsg, "connect %s: %s", s->addr,
                           tern_strerror(-err));
        return -err;
    }
    return tls_start(s, now, s->connect_timeout_ms);
}

/* TLS: seal frames from out into cout and send, while the socket takes
 * them. */
static int flush_tls(struct tern__server *s)
{
    for (int i = 0; i < 1024; i++) {
        size_t used = 0;
        int rv = send_cout(s);
        if (rv != 0) {
            return rv;
        }
        if (s->cout_len > 0 || s->out_off >= s->out.len) {
            break; /* socket full, or all sent */
        }
        rv = auth_tls_write(s->tls, s->out.base + s->out_off,
                            s->out.len - s->out_off, &used);
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "TLS to %s: %s", s->addr,
                               auth_tls_errmsg(s->tls));
            return rv;
        }
        s->out_off += used;
        take_cout(s);
    }
    if (s->out_off >= s->out.len) {
        s->out.len = 0;
        s->out_off = 0;
    }
    return 0;
}

int tern__server_flush(struct tern__server *s)
{
    if (s->tls != NULL) {
        return flush_tls(s);
    }
    while (s->out_off < s->out.len) {
        ssize_t n = send(s->fd, s->out.base + s->out_off,
                         s->out.len - s->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return 0;
            }
            if (errno == EINTR) {
                continue;
            }
            int rv = -errno;
            tern_errmsg_printf(s->errmsg, "send to %s: %s", s->addr,
                               tern_strerror(rv));
            return rv;
        }
        s->out_off += (size_t)n;
    }
    s->out.len = 0;
    s->out_off = 0;
    return 0;
}

/* TLS: one receive's records opened into in. */
static int read_tls(struct tern__server *s)
{
    size_t got = 0;
    int rv = recv_feed(s, &got);
    if (rv == TERN_ECLOSED) {
        tern_errmsg_printf(s->errmsg, "%s closed the connection", s->addr);
    }
    for (int i = 0; rv == 0 && i < 4096; i++) {
        size_t n = 0;
        if (s->in_cap - s->in_len < TERN__READ_CHUNK) {
            size_t cap = s->in_cap != 0 ? s->in_cap * 2 : 2 * TERN__READ_CHUNK;
            uint8_t *p = tern_realloc(s->in, cap);
            if (p == NULL) {
                return -ENOMEM;
            }
            s->in = p;
            s->in_cap = cap;
        }
        rv =
            auth_tls_read(s->tls, s->in + s->in_len, s->in_cap - s->in_len, &n);
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "TLS from %s: %s", s->addr,
                               auth_tls_errmsg(s->tls));
            return rv;
        }
        if (n == 0) {
            break;
        }
        s->in_len += n;
    }
    return rv;
}

int tern__server_read(struct tern__server *s)
{
    if (s->tls != NULL) {
        return read_tls(s);
    }
    for (;;) {
        if (s->in_cap - s->in_len < TERN__READ_CHUNK) {
            size_t cap = s->in_cap != 0 ? s->in_cap * 2 : 2 * TERN__READ_CHUNK;
            uint8_t *p = tern_realloc(s->in, cap);
            if (p == NULL) {
                return -ENOMEM;
            }
            s->in = p;
            s->in_cap = cap;
        }
        ssize_t n = recv(s->fd, s->in + s->in_len, s->in_cap - s->in_len, 0);
        if (n > 0) {
            s->in_len += (size_t)n;
            /* Parse what we have before reading more, so one busy socket
             * cannot grow the buffer without bound. */
            return 0;
        }
        if (n == 0) {
            tern_errmsg_printf(s->errmsg, "%s closed the connection", s->addr);
            return TERN_ECLOSED;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        }
        int rv = -errno;
        tern_errmsg_printf(s->errmsg, "recv from %s: %s", s->addr,
                           tern_strerror(rv));
        return rv;
    }
}
