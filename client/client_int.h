/*
 * libtern internals shared by client.c (request engine and public calls),
 * conn.c (server connections: address parsing, non-blocking sockets,
 * buffered I/O) and result.c (owned result objects). Not installed.
 */
#ifndef TERN_CLIENT_INT_H
#define TERN_CLIENT_INT_H

#include <poll.h>
#include <stdint.h>

#include <tern/tern.h>

#include "proto.h"

enum tern__conn_state {
    TERN__CONN_CLOSED = 0,
    TERN__CONN_CONNECTING,
    TERN__CONN_READY,
};

/* One server of the cluster and our connection to it. */
struct tern__server
{
    char *addr; /* "host:port" as given or hinted; owned */
    char *host; /* owned */
    char *port; /* owned */
    int fd;     /* -1 when closed */
    enum tern__conn_state state;
    int64_t connect_deadline; /* CONNECTING only */
    int64_t retry_after;      /* no reconnect before this (back-off) */
    int failures;             /* consecutive connection failures */
    struct tern_wbuf out;     /* frames not yet written; owned */
    size_t out_off;           /* bytes of out already written */
    uint8_t *in;              /* bytes read, not yet parsed; owned */
    size_t in_len;
    size_t in_cap;
    char errmsg[TERN_ERRMSG_SIZE]; /* why the last connection failed */
};

/* conn.c */
/* Split "host:port" / "[v6]:port"; the strings are owned by s. */
int tern__server_init(struct tern__server *s, const char *addr, size_t len);
void tern__server_close(struct tern__server *s);
void tern__server_free(struct tern__server *s);
/* Start a non-blocking connect (state CONNECTING or READY). */
int tern__server_connect(struct tern__server *s, int64_t now, int timeout_ms);
/* CONNECTING -> READY once the socket is writable; error if it failed. */
int tern__server_finish_connect(struct tern__server *s);
/* Write out buffered bytes; 0 (maybe partial) or an error. */
int tern__server_flush(struct tern__server *s);
/* Read what is available into in; 0, or an error (TERN_ECLOSED on EOF). */
int tern__server_read(struct tern__server *s);

/* Monotonic milliseconds. */
int64_t tern__now_ms(void);

/* Result objects (result.c); build from validated response bodies. */
struct tern_fetch_result *tern__fetch_result_new(const void *body, size_t len);
struct tern_queue_list *tern__queue_list_new(const void *body, size_t len);
struct tern_status *tern__status_new(const char *server,
                                     const void *body,
                                     size_t len);

#endif /* TERN_CLIENT_INT_H */
