/*
 * raft/codec.c: tern's wire frames for Raft messages and the bulk catch-up
 * side channel, carried as opaque messages by an xport. Encoded/decoded
 * here only; be careful when adapting: nodes of different versions talk
 * through it. Types and entry points: repl_codec.h.
 *
 * Frame (all integers little-endian, no padding, version 1):
 *
 *   off  size  field
 *   0    4     magic "TRNR" (0x524e5254 as u32)
 *   4    1     version (1)
 *   5    1     type: 1..6 = RAFT_IO_* (AppendEntries, AppendEntriesResult,
 *              RequestVote, RequestVoteResult, InstallSnapshot,
 *              TimeoutNow), 16 = BULK_REQ, 17 = BULK_DATA
 *   6    2     flags: bit 0 (REPL_FRAME_XXH3) the checksum is XXH3's;
 *              bit 1 (REPL_FRAME_ACCEPTS_XXH3) the sender decodes frames
 *              with bit 0, and tcp frames of version 2 (rdma/tcp.c); the
 *              other bits 0, ignored by a decoder (as every decoder so far
 *              ignored the whole field)
 *   8    4     checksum: tern_checksum32 (XXH32, seed "tern") over the whole
 *              frame with these 4 bytes taken as zero; with flag bit 0,
 *              tern_checksum32_xxh3 (seed "tern") of the same bytes
 *   12   4     reserved (0)
 *   16   8     frame length in bytes (must equal the received length)
 *   24   8     sender id
 *   32   2     sender address length L (<= 255), then L bytes (no NUL)
 *   ...        body
 *
 * Bodies (u64 unless noted):
 *   AppendEntries:       term, prev_log_index, prev_log_term, leader_commit,
 *                        u32 n_entries, u32 reserved,
 *                        n x {term, u16 type, u16 reserved, u32 reserved,
 *                             len}, then the n payloads concatenated
 *                        (their lengths must add up to the rest of frame)
 *   AppendEntriesResult: term, rejected, last_log_index
 *   RequestVote:         term, candidate_id, last_log_index, last_log_term,
 *                        u8 disrupt_leader, u8 pre_vote
 *   RequestVoteResult:   term, u8 vote_granted, u8 pre_vote (raft_tribool)
 *   InstallSnapshot:     term, last_index, last_term, conf_index,
 *                        configuration (below), data_len, data
 *   TimeoutNow:          term, last_log_index, last_log_term
 *   BULK_REQ:            snap_index, pos, len
 *   BULK_DATA:           snap_index, pos, u8 status (0 ok, 1 error),
 *                        u8[3] reserved, u32 len, len bytes
 *
 * Configuration: u32 n, n x {u64 id, u8 role, u16 address length A,
 * A bytes}. (libraft's own encoding is raft_configuration_encode, but its
 * decoder is not exported by 0.15, and this one is bounded and versioned
 * with the frame.)
 *
 * Decoding allocates with raft_malloc exactly what the raft_io recv
 * contract hands to the core: one entries array plus ONE batch holding all
 * payloads of an AppendEntries, and the configuration plus a data buffer of
 * an InstallSnapshot. Nothing else survives the decode.
 */
#include <errno.h>
#include <string.h>

#include "repl_codec.h"

#define FRAME_MAGIC      0x524e5254u
#define FRAME_VERSION    1
#define FRAME_PREAMBLE   24
#define FRAME_FLAGS_OFF  6
#define FRAME_CSUM_OFF   8
#define ENTRY_HEADER     24
#define CONF_MAX_SERVERS 1024

static void put_preamble(struct tern_wbuf *w,
                         unsigned type,
                         unsigned flags,
                         uint64_t sender,
                         const char *addr,
                         size_t addr_len)
{
    tern_wbuf_u32(w, FRAME_MAGIC);
    tern_wbuf_u8(w, FRAME_VERSION);
    tern_wbuf_u8(w, (uint8_t)type);
    tern_wbuf_u16(w, (uint16_t)flags);
    tern_wbuf_u32(w, 0); /* checksum, patched */
    tern_wbuf_u32(w, 0);
    tern_wbuf_u64(w, 0); /* length, patched */
    tern_wbuf_u64(w, sender);
    tern_wbuf_u16(w, (uint16_t)addr_len);
    tern_wbuf_put(w, addr, addr_len);
}

/* Patch length and checksum once the header and payload iovecs are final
 * (the checksum the header's flags name). */
static void seal(struct repl_frame *f)
{
    struct tern_checksum32_either st;
    uint8_t *h = f->head.base;
    tern_put_u64(h + 16, f->len);
    tern_put_u32(h + FRAME_CSUM_OFF, 0);
    tern_checksum32_either_begin(
        &st, (tern_get_u16(h + FRAME_FLAGS_OFF) & REPL_FRAME_XXH3) != 0,
        TERN_CHECKSUM_SEED);
    for (unsigned i = 0; i < f->n_iov; i++) {
        if (f->iov[i].len > 0) {
            tern_checksum32_either_update(&st, f->iov[i].base, f->iov[i].len);
        }
    }
    tern_put_u32(h + FRAME_CSUM_OFF, tern_checksum32_either_end(&st));
}

void repl_frame_release(struct repl_frame *f)
{
    tern_wbuf_free(&f->head);
    tern_free(f->iov);
    f->iov = NULL;
    f->n_iov = 0;
}

int repl_conf_encode(const struct raft_configuration *c, struct tern_wbuf *w)
{
    tern_wbuf_u32(w, c->n);
    for (unsigned i = 0; i < c->n; i++) {
        size_t alen = strlen(c->servers[i].address);
        if (alen > REPL_WIRE_ADDR_MAX) {
            return TERN_EINVAL;
        }
        tern_wbuf_u64(w, c->servers[i].id);
        tern_wbuf_u8(w, (uint8_t)c->servers[i].role);
        tern_wbuf_u16(w, (uint16_t)alen);
        tern_wbuf_put(w, c->servers[i].address, alen);
    }
    return w->err;
}

int repl_conf_decode(struct tern_cursor *cur, struct raft_configuration *c)
{
    char addr[REPL_WIRE_ADDR_MAX + 1];
    uint32_t n = tern_cursor_u32(cur);
    raft_configuration_init(c);
    if (cur->err != 0 || n > CONF_MAX_SERVERS) {
        return TERN_EMALFORMED;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = tern_cursor_u64(cur);
        uint8_t role = tern_cursor_u8(cur);
        uint16_t alen = tern_cursor_u16(cur);
        const uint8_t *a;
        int rv;
        if (alen > REPL_WIRE_ADDR_MAX) {
            goto malformed;
        }
        a = tern_cursor_bytes(cur, alen);
        if (cur->err != 0 || id == 0 || role > RAFT_SPARE ||
            memchr(a, 0, alen) != NULL) {
            goto malformed;
        }
        memcpy(addr, a, alen);
        addr[alen] = '\0';
        rv = raft_configuration_add(c, id, addr, role);
        if (rv == RAFT_NOMEM) {
            raft_configuration_close(c);
            return -ENOMEM;
        }
        if (rv != 0) {
            goto malformed;
        }
    }
    return 0;

malformed:
    raft_configuration_close(c);
    raft_configuration_init(c);
    return TERN_EMALFORMED;
}

static int start_frame(struct repl_frame *f,
                       unsigned type,
                       unsigned flags,
                       uint64_t sender,
                       const char *addr,
                       unsigned max_iov)
{
    size_t alen = strlen(addr);
    if (alen > REPL_WIRE_ADDR_MAX) {
        return TERN_EINVAL;
    }
    tern_wbuf_init(&f->head);
    f->n_iov = 0;
    f->len = 0;
    f->iov = tern_calloc(max_iov, sizeof *f->iov);
    if (f->iov == NULL) {
        return -ENOMEM;
    }
    put_preamble(&f->head, type, flags, sender, addr, alen);
    return 0;
}

/* Finish: iov[0] = header, payloads already at iov[1..]. */
static int finish_frame(struct repl_frame *f)
{
    if (f->head.err != 0) {
        repl_frame_release(f);
        return -ENOMEM;
    }
    f->iov[0].base = f->head.base;
    f->iov[0].len = f->head.len;
    f->len = 0;
    for (unsigned i = 0; i < f->n_iov; i++) {
        f->len += f->iov[i].len;
    }
    seal(f);
    return 0;
}

int repl_codec_encode(uint64_t sender_id,
                      const char *sender_addr,
                      unsigned flags,
                      const struct raft_message *m,
                      size_t max_len,
                      struct repl_frame *f,
                      unsigned *n_sent)
{
    struct tern_wbuf *w = &f->head;
    unsigned max_iov = 2;
    int rv;

    *n_sent = 0;
    if (m->type == RAFT_IO_APPEND_ENTRIES) {
        max_iov = 1 + m->append_entries.n_entries;
    }
    rv = start_frame(f, m->type, flags, sender_id, sender_addr, max_iov);
    if (rv != 0) {
        return rv;
    }
    f->n_iov = 1;

    switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES: {
        const struct raft_append_entries *a = &m->append_entries;
        size_t fixed = w->len + 40;
        size_t total;
        unsigned n = 0;
        /* Largest prefix of entries that fits in max_len. */
        total = fixed;
        while (n < a->n_entries) {
            size_t add = ENTRY_HEADER + a->entries[n].buf.len;
            if (total + add > max_len) {
                break;
            }
            total += add;
            n++;
        }
        if (n == 0 && a->n_entries > 0) {
            repl_frame_release(f);
            return TERN_ETOOBIG;
        }
        tern_wbuf_u64(w, a->term);
        tern_wbuf_u64(w, a->prev_log_index);
        tern_wbuf_u64(w, a->prev_log_term);
        tern_wbuf_u64(w, a->leader_commit);
        tern_wbuf_u32(w, n);
        tern_wbuf_u32(w, 0);
        for (unsigned i = 0; i < n; i++) {
            tern_wbuf_u64(w, a->entries[i].term);
            tern_wbuf_u16(w, a->entries[i].type);
            tern_wbuf_u16(w, 0);
            tern_wbuf_u32(w, 0);
            tern_wbuf_u64(w, a->entries[i].buf.len);
            f->iov[f->n_iov].base = a->entries[i].buf.base;
            f->iov[f->n_iov].len = a->entries[i].buf.len;
            f->n_iov++;
        }
        *n_sent = n;
        break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT:
        tern_wbuf_u64(w, m->append_entries_result.term);
        tern_wbuf_u64(w, m->append_entries_result.rejected);
        tern_wbuf_u64(w, m->append_entries_result.last_log_index);
        break;
    case RAFT_IO_REQUEST_VOTE:
        tern_wbuf_u64(w, m->request_vote.term);
        tern_wbuf_u64(w, m->request_vote.candidate_id);
        tern_wbuf_u64(w, m->request_vote.last_log_index);
        tern_wbuf_u64(w, m->request_vote.last_log_term);
        tern_wbuf_u8(w, m->request_vote.disrupt_leader ? 1 : 0);
        tern_wbuf_u8(w, m->request_vote.pre_vote ? 1 : 0);
        break;
    case RAFT_IO_REQUEST_VOTE_RESULT:
        tern_wbuf_u64(w, m->request_vote_result.term);
        tern_wbuf_u8(w, m->request_vote_result.vote_granted ? 1 : 0);
        tern_wbuf_u8(w, (uint8_t)m->request_vote_result.pre_vote);
        break;
    case RAFT_IO_INSTALL_SNAPSHOT: {
        const struct raft_install_snapshot *s = &m->install_snapshot;
        tern_wbuf_u64(w, s->term);
        tern_wbuf_u64(w, s->last_index);
        tern_wbuf_u64(w, s->last_term);
        tern_wbuf_u64(w, s->conf_index);
        rv = repl_conf_encode(&s->conf, w);
        if (rv == TERN_EINVAL) {
            repl_frame_release(f);
            return rv;
        }
        tern_wbuf_u64(w, s->data.len);
        f->iov[1].base = s->data.base;
        f->iov[1].len = s->data.len;
        f->n_iov = 2;
        break;
    }
    case RAFT_IO_TIMEOUT_NOW:
        tern_wbuf_u64(w, m->timeout_now.term);
        tern_wbuf_u64(w, m->timeout_now.last_log_index);
        tern_wbuf_u64(w, m->timeout_now.last_log_term);
        break;
    default:
        repl_frame_release(f);
        return TERN_EINVAL;
    }
    rv = finish_frame(f);
    if (rv == 0 && f->len > max_len) {
        repl_frame_release(f);
        return TERN_ETOOBIG;
    }
    return rv;
}

int repl_codec_encode_bulk(uint64_t sender_id,
                           const char *sender_addr,
                           unsigned flags,
                           unsigned type,
                           const struct repl_bulk_msg *b,
                           struct repl_frame *f)
{
    struct tern_wbuf *w = &f->head;
    int rv = start_frame(f, type, flags, sender_id, sender_addr, 2);
    if (rv != 0) {
        return rv;
    }
    f->n_iov = 1;
    tern_wbuf_u64(w, b->snap_index);
    tern_wbuf_u64(w, b->pos);
    if (type == REPL_WIRE_BULK_REQ) {
        tern_wbuf_u64(w, b->len);
    } else if (type == REPL_WIRE_BULK_DATA && b->len <= UINT32_MAX) {
        tern_wbuf_u8(w, b->status);
        tern_wbuf_u8(w, 0);
        tern_wbuf_u16(w, 0);
        tern_wbuf_u32(w, (uint32_t)b->len);
        f->iov[1].base = b->data;
        f->iov[1].len = b->len;
        f->n_iov = 2;
    } else {
        repl_frame_release(f);
        return TERN_EINVAL;
    }
    return finish_frame(f);
}

void repl_wire_drop_entries(struct raft_append_entries *a)
{
    if (a->entries != NULL) {
        raft_free(a->entries[0].batch);
        raft_free(a->entries);
    }
    a->entries = NULL;
    a->n_entries = 0;
}

void repl_wire_release(struct repl_wire *w)
{
    if (w->type == RAFT_IO_APPEND_ENTRIES) {
        repl_wire_drop_entries(&w->msg.append_entries);
    } else if (w->type == RAFT_IO_INSTALL_SNAPSHOT) {
        raft_configuration_close(&w->msg.install_snapshot.conf);
        raft_configuration_init(&w->msg.install_snapshot.conf);
        raft_free(w->msg.install_snapshot.data.base);
        w->msg.install_snapshot.data.base = NULL;
    }
}

static int decode_append_entries(struct tern_cursor *c, struct repl_wire *w)
{
    struct raft_append_entries *a = &w->msg.append_entries;
    const uint8_t *hdrs;
    uint8_t *batch;
    size_t payload = 0;
    uint32_t n;

    a->term = tern_cursor_u64(c);
    a->prev_log_index = tern_cursor_u64(c);
    a->prev_log_term = tern_cursor_u64(c);
    a->leader_commit = tern_cursor_u64(c);
    n = tern_cursor_u32(c);
    (void)tern_cursor_u32(c);
    a->entries = NULL;
    a->n_entries = 0;
    if (c->err != 0 || n > tern_cursor_left(c) / ENTRY_HEADER) {
        return TERN_EMALFORMED;
    }
    if (n == 0) {
        return tern_cursor_left(c) == 0 ? 0 : TERN_EMALFORMED;
    }
    hdrs = tern_cursor_bytes(c, (size_t)n * ENTRY_HEADER);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *h = hdrs + (size_t)i * ENTRY_HEADER;
        uint64_t len = tern_get_u64(h + 16);
        uint16_t type = tern_get_u16(h + 8);
        if (type < RAFT_COMMAND || type > RAFT_CHANGE || tern_get_u64(h) == 0 ||
            len > tern_cursor_left(c) - payload) {
            return TERN_EMALFORMED;
        }
        payload += (size_t)len;
    }
    if (payload != tern_cursor_left(c)) {
        return TERN_EMALFORMED;
    }
    a->entries = raft_calloc(n, sizeof *a->entries);
    batch = raft_malloc(payload > 0 ? payload : 1);
    if (a->entries == NULL || batch == NULL) {
        raft_free(a->entries);
        raft_free(batch);
        a->entries = NULL;
        return -ENOMEM;
    }
    memcpy(batch, c->p, payload);
    c->p += payload;
    payload = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *h = hdrs + (size_t)i * ENTRY_HEADER;
        struct raft_entry *e = &a->entries[i];
        e->term = tern_get_u64(h);
        e->type = tern_get_u16(h + 8);
        e->buf.len = (size_t)tern_get_u64(h + 16);
        e->buf.base = batch + payload;
        e->batch = batch;
        payload += e->buf.len;
    }
    a->n_entries = n;
    return 0;
}

static int decode_install_snapshot(struct tern_cursor *c, struct repl_wire *w)
{
    struct raft_install_snapshot *s = &w->msg.install_snapshot;
    uint64_t len;
    int rv;

    s->term = tern_cursor_u64(c);
    s->last_index = tern_cursor_u64(c);
    s->last_term = tern_cursor_u64(c);
    s->conf_index = tern_cursor_u64(c);
    s->data.base = NULL;
    s->data.len = 0;
    raft_configuration_init(&s->conf);
    if (c->err != 0) {
        return TERN_EMALFORMED;
    }
    rv = repl_conf_decode(c, &s->conf);
    if (rv != 0) {
        return rv;
    }
    len = tern_cursor_u64(c);
    if (c->err != 0 || len != tern_cursor_left(c) || s->last_index == 0 ||
        s->last_term == 0) {
        raft_configuration_close(&s->conf);
        raft_configuration_init(&s->conf);
        return TERN_EMALFORMED;
    }
    s->data.base = raft_malloc(len > 0 ? (size_t)len : 1);
    if (s->data.base == NULL) {
        raft_configuration_close(&s->conf);
        raft_configuration_init(&s->conf);
        return -ENOMEM;
    }
    memcpy(s->data.base, c->p, (size_t)len);
    s->data.len = (size_t)len;
    c->p += len;
    return 0;
}

int repl_codec_decode(const void *buf, size_t len, struct repl_wire *w)
{
    struct tern_cursor c;
    struct tern_checksum32_either st;
    const uint8_t *b = buf;
    uint32_t csum;
    uint16_t alen;
    const uint8_t *addr;
    int rv = 0;

    memset(w, 0, sizeof *w);
    if (len < FRAME_PREAMBLE + 10) {
        return TERN_EMALFORMED;
    }
    tern_cursor_init(&c, buf, len);
    if (tern_cursor_u32(&c) != FRAME_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (tern_cursor_u8(&c) != FRAME_VERSION) {
        return TERN_EVERSION;
    }
    w->type = tern_cursor_u8(&c);
    w->flags = tern_cursor_u16(&c);
    csum = tern_cursor_u32(&c);
    (void)tern_cursor_u32(&c);
    if (tern_cursor_u64(&c) != len) {
        return TERN_EMALFORMED;
    }
    {
        static const uint8_t zero[4] = {0, 0, 0, 0};
        tern_checksum32_either_begin(&st, (w->flags & REPL_FRAME_XXH3) != 0,
                                     TERN_CHECKSUM_SEED);
        tern_checksum32_either_update(&st, b, FRAME_CSUM_OFF);
        tern_checksum32_either_update(&st, zero, 4);
        tern_checksum32_either_update(&st, b + FRAME_CSUM_OFF + 4,
                                      len - FRAME_CSUM_OFF - 4);
        if (tern_checksum32_either_end(&st) != csum) {
            return TERN_ECORRUPT;
        }
    }
    w->sender_id = tern_cursor_u64(&c);
    alen = tern_cursor_u16(&c);
    if (alen > REPL_WIRE_ADDR_MAX) {
        return TERN_EMALFORMED;
    }
    addr = tern_cursor_bytes(&c, alen);
    if (c.err != 0 || w->sender_id == 0 || memchr(addr, 0, alen) != NULL) {
        return TERN_EMALFORMED;
    }
    memcpy(w->sender_addr, addr, alen);
    w->sender_addr[alen] = '\0';

    w->msg.type = (unsigned short)w->type;
    w->msg.server_id = w->sender_id;
    w->msg.server_address = w->sender_addr;

    switch (w->type) {
    case RAFT_IO_APPEND_ENTRIES:
        return decode_append_entries(&c, w);
    case RAFT_IO_APPEND_ENTRIES_RESULT:
        w->msg.append_entries_result.term = tern_cursor_u64(&c);
        w->msg.append_entries_result.rejected = tern_cursor_u64(&c);
        w->msg.append_entries_result.last_log_index = tern_cursor_u64(&c);
        break;
    case RAFT_IO_REQUEST_VOTE: {
        uint8_t d, p;
        w->msg.request_vote.term = tern_cursor_u64(&c);
        w->msg.request_vote.candidate_id = tern_cursor_u64(&c);
        w->msg.request_vote.last_log_index = tern_cursor_u64(&c);
        w->msg.request_vote.last_log_term = tern_cursor_u64(&c);
        d = tern_cursor_u8(&c);
        p = tern_cursor_u8(&c);
        if (d > 1 || p > 1) {
            return TERN_EMALFORMED;
        }
        w->msg.request_vote.disrupt_leader = d != 0;
        w->msg.request_vote.pre_vote = p != 0;
        break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
        uint8_t g, p;
        w->msg.request_vote_result.term = tern_cursor_u64(&c);
        g = tern_cursor_u8(&c);
        p = tern_cursor_u8(&c);
        if (g > 1 || p > raft_tribool_false) {
            return TERN_EMALFORMED;
        }
        w->msg.request_vote_result.vote_granted = g != 0;
        w->msg.request_vote_result.pre_vote = (raft_tribool)p;
        break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT:
        return decode_install_snapshot(&c, w);
    case RAFT_IO_TIMEOUT_NOW:
        w->msg.timeout_now.term = tern_cursor_u64(&c);
        w->msg.timeout_now.last_log_index = tern_cursor_u64(&c);
        w->msg.timeout_now.last_log_term = tern_cursor_u64(&c);
        break;
    case REPL_WIRE_BULK_REQ:
        w->bulk.snap_index = tern_cursor_u64(&c);
        w->bulk.pos = tern_cursor_u64(&c);
        w->bulk.len = tern_cursor_u64(&c);
        break;
    case REPL_WIRE_BULK_DATA: {
        uint32_t n;
        w->bulk.snap_index = tern_cursor_u64(&c);
        w->bulk.pos = tern_cursor_u64(&c);
        w->bulk.status = tern_cursor_u8(&c);
        (void)tern_cursor_u8(&c);
        (void)tern_cursor_u16(&c);
        n = tern_cursor_u32(&c);
        w->bulk.len = n;
        w->bulk.data = tern_cursor_bytes(&c, n);
        if (w->bulk.status > REPL_BULK_STATUS_ERROR) {
            return TERN_EMALFORMED;
        }
        break;
    }
    default:
        return TERN_EMALFORMED;
    }
    if (c.err != 0 || tern_cursor_left(&c) != 0) {
        rv = TERN_EMALFORMED;
    }
    return rv;
}
