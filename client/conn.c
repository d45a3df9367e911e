/*
 * libtern server connections: "host:port" parsing, non-blocking TCP
 * connect with a deadline, and buffered writes/reads on a socket. The
 * request engine (engine.c) decides when to connect and what to send;
 * this file only moves bytes. Plain POSIX sockets (no libuv: libtern must
 * stay dependency-free).
 */
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
    s->fd = -1;
    s->state = TERN__CONN_CLOSED;
    s->out.len = 0;
    s->out.err = 0;
    s->out_off = 0;
    s->in_len = 0;
}

void tern__server_free(struct tern__server *s)
{
    tern__server_close(s);
    tern_wbuf_free(&s->out);
    tern_free(s->in);
    tern_free(s->addr);
    tern_free(s->host);
    tern_free(s->port);
    s->in = NULL;
    s->addr = s->host = s->port = NULL;
}

int tern__server_connect(struct tern__server *s, int64_t now, int timeout_ms)
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
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        s->state = TERN__CONN_READY;
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
    return 0;

err_after_socket:
    close(fd);
err_after_getaddrinfo:
    freeaddrinfo(res);
    return rv;
}

int tern__server_finish_connect(struct tern__server *s)
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
    s->state = TERN__CONN_READY;
    s->failures = 0;
    return 0;
}

int tern__server_flush(struct tern__server *s)
{
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

int tern__server_read(struct tern__server *s)
{
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
