/*
 * The client-frame state machine: given the bytes a connection has
 * received so far, decide what the server does next. Pure (no I/O), so
 * tests/unit/node/test_frame.c drives it byte by byte.
 *
 * Happy path: fewer than 24 bytes -> NEED_MORE; header OK but body
 * incomplete -> NEED_MORE with need = the whole frame's size (the server
 * sizes its read buffer to it); whole frame with a good checksum and a body
 * that decodes -> REQUEST (consumed = 24 + body_len).
 *
 * Failure modes:
 *   - bad magic, bad version, body_len above the limit, bad checksum: the
 *     next frame boundary cannot be trusted -> FATAL: answer
 *     (PROTO_OP_ERROR when the header itself is bad, the request op for
 *     an oversized or corrupt frame of a known op) and close the
 *     connection;
 *   - a frame that is intact but whose request is wrong (a response bit,
 *     status != 0, unknown op, malformed body, bad name) -> ERROR: answer
 *     and keep serving the next frame.
 * out->op of an ERROR/FATAL is the op to pass to proto_encode_error, which
 * sets the response bit itself.
 * The header is read with raw little-endian loads for the error replies, so
 * nothing depends on what proto_header_decode leaves in *h on failure.
 */
#include <stdio.h>

#include <string.h>

#include "frame.h"

static bool op_known(uint8_t op)
{
    return (op >= PROTO_OP_QUEUE_CREATE && op <= PROTO_OP_SETTLE) ||
           op == PROTO_OP_CLAIM || op == PROTO_OP_PRODUCE_DELAYED ||
           op == PROTO_OP_GROUP_STATUS || op == PROTO_OP_CLUSTER_TRANSFER ||
           op == PROTO_OP_BACKUP || op == PROTO_OP_MEMBER ||
           op == PROTO_OP_HELLO;
}

static void set_error(struct node_frame *f,
                      enum node_frame_action action,
                      uint8_t op,
                      int status,
                      const char *msg)
{
    f->action = action;
    f->op = op;
    f->status = status;
    (void)snprintf(f->message, sizeof(f->message), "%s", msg);
}

void node_frame_next(const uint8_t *buf,
                     size_t len,
                     uint32_t max_body,
                     struct node_frame *f)
{
    struct proto_header h;
    uint8_t raw_op;
    uint32_t raw_len;
    int rv;

    memset(f, 0, sizeof(*f));
    f->action = NODE_FRAME_NEED_MORE;
    if (len < PROTO_HEADER_SIZE) {
        return;
    }
    raw_op = buf[3];
    raw_len = tern_get_u32(buf + 4);
    rv = proto_header_decode(buf, max_body, &h);
    if (rv != 0) {
        char m[128];
        uint16_t magic = tern_get_u16(buf);
        f->consumed = len;
        if (magic != PROTO_MAGIC) {
            (void)snprintf(m, sizeof(m), "bad magic 0x%04x (expected 0x%04x)",
                           magic, PROTO_MAGIC);
            set_error(f, NODE_FRAME_FATAL, PROTO_OP_ERROR, TERN_EMALFORMED, m);
            return;
        }
        f->request_id = tern_get_u64(buf + 8);
        if (buf[2] < TERN_PROTO_VERSION || buf[2] > PROTO_VERSION_MAX) {
            (void)snprintf(m, sizeof(m),
                           "protocol version %u not supported "
                           "(this server speaks %u to %u)",
                           buf[2], TERN_PROTO_VERSION, PROTO_VERSION_MAX);
            set_error(f, NODE_FRAME_FATAL, PROTO_OP_ERROR, TERN_EVERSION, m);
            return;
        }
        if (raw_len > max_body) {
            (void)snprintf(m, sizeof(m),
                           "frame body of %u bytes exceeds "
                           "max_frame_bytes %u",
                           raw_len, max_body);
            set_error(f, NODE_FRAME_FATAL,
                      op_known(raw_op) ? raw_op : PROTO_OP_ERROR, TERN_ETOOBIG,
                      m);
            return;
        }
        (void)snprintf(m, sizeof(m), "bad frame header (%s)",
                       tern_strerror(rv));
        set_error(
            f, NODE_FRAME_FATAL, PROTO_OP_ERROR,
            rv == TERN_EVERSION || rv == TERN_ETOOBIG ? rv : TERN_EMALFORMED,
            m);
        return;
    }
    if ((size_t)h.body_len > len - PROTO_HEADER_SIZE) {
        f->need = PROTO_HEADER_SIZE + (size_t)h.body_len;
        return; /* NEED_MORE */
    }
    f->consumed = PROTO_HEADER_SIZE + (size_t)h.body_len;
    f->request_id = h.request_id;
    if (proto_frame_verify(buf, buf + PROTO_HEADER_SIZE, h.body_len) != 0) {
        /* body_len itself may be the corrupted field. */
        f->consumed = len;
        set_error(f, NODE_FRAME_FATAL, op_known(h.op) ? h.op : PROTO_OP_ERROR,
                  TERN_ECORRUPT, "frame checksum mismatch");
        return;
    }
    if (!op_known(h.op)) {
        char m[64];
        (void)snprintf(m, sizeof(m), "unknown request op 0x%02x", h.op);
        set_error(f, NODE_FRAME_ERROR,
                  (h.op & PROTO_OP_RESPONSE) != 0 ? PROTO_OP_ERROR : h.op,
                  TERN_EINVAL, m);
        return;
    }
    if (h.status != 0) {
        set_error(f, NODE_FRAME_ERROR, h.op, TERN_EMALFORMED,
                  "request with a non-zero status field");
        return;
    }
    rv = proto_decode_request(h.op, buf + PROTO_HEADER_SIZE, h.body_len,
                              &f->req);
    if (rv != 0) {
        char m[96];
        (void)snprintf(m, sizeof(m), "cannot decode request: %s",
                       tern_strerror(rv));
        set_error(f, NODE_FRAME_ERROR, h.op, rv, m);
        return;
    }
    f->action = NODE_FRAME_REQUEST;
    f->op = h.op;
}
