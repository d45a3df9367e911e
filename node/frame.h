/*
 * The client-frame state machine (frame.c): what the server does with
 * the bytes a connection has received so far. Private to node/ and its
 * tests.
 */
#ifndef TERN_NODE_FRAME_H
#define TERN_NODE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

enum node_frame_action {
    NODE_FRAME_NEED_MORE = 0, /* wait for more bytes */
    NODE_FRAME_REQUEST,       /* req is a decoded request */
    NODE_FRAME_ERROR,         /* answer the error, skip the frame, go on */
    NODE_FRAME_FATAL,         /* answer the error, then close */
};

struct node_frame
{
    enum node_frame_action action;
    size_t consumed; /* bytes of the buffer this frame used */
    size_t need;     /* NEED_MORE with a whole, valid header: the bytes of
                        the whole frame (header + body_len); else 0 */
    uint8_t op;      /* request op (ERROR/FATAL: op for proto_encode_error) */
    uint64_t request_id;
    int status;               /* ERROR/FATAL: tern code to answer */
    char message[128];        /* ERROR/FATAL: human-readable detail */
    struct proto_request req; /* REQUEST: borrows from the buffer */
};

/* Look at the bytes received so far (buf, len) and decide. max_body is the
 * largest accepted body. Never reads beyond len. */
void node_frame_next(const uint8_t *buf,
                     size_t len,
                     uint32_t max_body,
                     struct node_frame *out);

#endif /* TERN_NODE_FRAME_H */
