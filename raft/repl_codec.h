/*
 * Private to raft/ (and its tests and fuzz target): tern's wire frames for
 * Raft messages and the bulk catch-up side channel (codec.c, which
 * documents the byte layout at its top). Needs nothing of struct repl: the
 * fuzz target includes only this header.
 */
#ifndef TERN_REPL_CODEC_H
#define TERN_REPL_CODEC_H

#include <stdbool.h>
#include <stdint.h>

#include <raft.h>

#include <tern_common.h>

#include "xport.h"

enum {
    REPL_WIRE_BULK_REQ = 16,
    REPL_WIRE_BULK_DATA = 17,
};
#define REPL_WIRE_ADDR_MAX     255
#define REPL_BULK_STATUS_OK    0
#define REPL_BULK_STATUS_ERROR 1

struct repl_bulk_msg
{
    uint64_t snap_index; /* InstallSnapshot last_index the fetch belongs to */
    uint64_t pos;
    uint64_t len;        /* BULK_REQ: bytes wanted; BULK_DATA: data bytes */
    uint8_t status;      /* BULK_DATA only */
    const uint8_t *data; /* BULK_DATA: borrowed from the frame */
};

/* A decoded frame. For Raft types, msg's dynamic members (AppendEntries
 * entries array + one batch, InstallSnapshot conf + data.base) are
 * raft_malloc'd and owned by whoever holds the struct until handed to raft
 * (or released with repl_wire_release). */
/* Frame flags (codec.c): the checksum is XXH3's; the sender decodes such
 * frames (and the tcp transport's version 2). */
#define REPL_FRAME_XXH3         0x1u
#define REPL_FRAME_ACCEPTS_XXH3 0x2u

struct repl_wire
{
    unsigned type;  /* RAFT_IO_* or REPL_WIRE_BULK_* */
    unsigned flags; /* the frame's REPL_FRAME_* (and any unknown bits) */
    uint64_t sender_id;
    char sender_addr[REPL_WIRE_ADDR_MAX + 1];
    struct raft_message msg;   /* Raft types; server_address -> sender_addr */
    struct repl_bulk_msg bulk; /* bulk types */
};

/* Encoded frame: a header buffer plus borrowed payload iovecs (entry
 * payloads, snapshot data). iov[0] is the header. Valid while the source
 * message is. Release with repl_frame_release. */
struct repl_frame
{
    struct tern_wbuf head;
    struct xport_iov *iov;
    unsigned n_iov;
    size_t len; /* total frame length */
};

/* Encode a Raft message. flags: REPL_FRAME_* (REPL_FRAME_XXH3 only toward
 * a peer whose frames carry REPL_FRAME_ACCEPTS_XXH3). max_len: if an
 * AppendEntries would exceed it, only a prefix of the entries is encoded
 * (*n_sent tells how many; a prefix of an AppendEntries is itself a valid
 * AppendEntries). Returns 0, TERN_ETOOBIG (not even one entry / the
 * message fits), -ENOMEM or TERN_EINVAL. */
int repl_codec_encode(uint64_t sender_id,
                      const char *sender_addr,
                      unsigned flags,
                      const struct raft_message *m,
                      size_t max_len,
                      struct repl_frame *f,
                      unsigned *n_sent);
/* Encode a bulk message (type REPL_WIRE_BULK_*). data may be NULL if
 * bulk->len == 0 or type is BULK_REQ. */
int repl_codec_encode_bulk(uint64_t sender_id,
                           const char *sender_addr,
                           unsigned flags,
                           unsigned type,
                           const struct repl_bulk_msg *bulk,
                           struct repl_frame *f);
void repl_frame_release(struct repl_frame *f);
/* Decode untrusted bytes. On 0, *w owns raft_malloc'd memory (see above);
 * on error nothing is allocated. Errors: TERN_EMALFORMED, TERN_ECORRUPT,
 * TERN_EVERSION, -ENOMEM. */
int repl_codec_decode(const void *buf, size_t len, struct repl_wire *w);
/* Free what a decoded (undelivered) Raft message owns. */
void repl_wire_release(struct repl_wire *w);
/* Free a decoded AppendEntries' entries (array + batch) and leave it a
 * heartbeat: entries NULL, n_entries 0. */
void repl_wire_drop_entries(struct raft_append_entries *a);
/* Configuration codec (configurationDecode is not exported by 0.15). */
int repl_conf_encode(const struct raft_configuration *c, struct tern_wbuf *w);
int repl_conf_decode(struct tern_cursor *cur, struct raft_configuration *c);

#endif /* TERN_REPL_CODEC_H */
