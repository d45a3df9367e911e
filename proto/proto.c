/*
 * tern client wire protocol: frame header codec, checksums, request and
 * response body encoders and defensive decoders. The byte layout is
 * documented at the top of proto.h (the file that owns the format); this
 * file follows it exactly. Encoded/decoded, be careful when adapting: the
 * layout is shared by libtern and ternd and versioned by TERN_PROTO_VERSION.
 *
 * Decoders treat every byte as untrusted: all reads go through a bounded
 * tern_cursor, lengths are checked before anything is borrowed, and a body
 * with bytes left over after its last field is TERN_EMALFORMED. Decoded
 * structs borrow pointers into the caller's buffer and never allocate.
 *
 * Encoders append one whole frame to a tern_wbuf. Errors found while
 * encoding (an oversized string, an invalid name, ENOMEM) leave w->len at
 * the start of the frame, so a partially written frame is never sent.
 */
#include <errno.h>

#include "proto.h"

#define PROTO__OFF_MAGIC      0
#define PROTO__OFF_VERSION    2
#define PROTO__OFF_OP         3
#define PROTO__OFF_BODY_LEN   4
#define PROTO__OFF_REQUEST_ID 8
#define PROTO__OFF_STATUS     16
#define PROTO__OFF_CHECKSUM   20
#define PROTO__CHECKED_HEADER 20
/* Longest error message we put on the wire. */
#define PROTO__MAX_ERROR_MESSAGE 1024

/* The checksum of a frame (header bytes with its version, body): by the
 * version byte. 0 with *sum, or TERN_EVERSION for an unknown version. */
static int frame_sum(const uint8_t *hdr,
                     const void *body,
                     size_t body_len,
                     uint32_t *sum)
{
    if (hdr[PROTO__OFF_VERSION] == PROTO_VERSION_XXH3) {
        uint32_t seed = tern_checksum32(hdr, PROTO__CHECKED_HEADER);
        *sum = tern_checksum32_xxh3(body_len > 0 ? body : hdr, body_len, seed);
        return 0;
    }
    if (hdr[PROTO__OFF_VERSION] == TERN_PROTO_VERSION) {
        struct tern_checksum_state st;
        tern_checksum32_begin(&st);
        tern_checksum32_update(&st, hdr, PROTO__CHECKED_HEADER);
        if (body_len > 0) {
            tern_checksum32_update(&st, body, body_len);
        }
        *sum = tern_checksum32_end(&st);
        return 0;
    }
    return TERN_EVERSION;
}

int proto_header_decode(const void *buf,
                        uint32_t max_body,
                        struct proto_header *h)
{
    const uint8_t *b = buf;
    if (tern_get_u16(b + PROTO__OFF_MAGIC) != PROTO_MAGIC) {
        return TERN_EMALFORMED;
    }
    h->version = b[PROTO__OFF_VERSION];
    h->op = b[PROTO__OFF_OP];
    h->body_len = tern_get_u32(b + PROTO__OFF_BODY_LEN);
    h->request_id = tern_get_u64(b + PROTO__OFF_REQUEST_ID);
    h->status = (int32_t)tern_get_u32(b + PROTO__OFF_STATUS);
    h->checksum = tern_get_u32(b + PROTO__OFF_CHECKSUM);
    if (h->version < TERN_PROTO_VERSION || h->version > PROTO_VERSION_MAX) {
        return TERN_EVERSION;
    }
    if (h->body_len > max_body) {
        return TERN_ETOOBIG;
    }
    return 0;
}

int proto_frame_verify(const void *header_bytes,
                       const void *body,
                       size_t body_len)
{
    const uint8_t *hdr = header_bytes;
    uint32_t sum;
    if (frame_sum(hdr, body, body_len, &sum) != 0) {
        return TERN_ECORRUPT;
    }
    return sum == tern_get_u32(hdr + PROTO__OFF_CHECKSUM) ? 0 : TERN_ECORRUPT;
}

int proto_frame_parse(const void *buf,
                      size_t len,
                      uint32_t max_body,
                      struct proto_header *h,
                      const void **body)
{
    const uint8_t *b = buf;
    int rv;
    if (len < PROTO_HEADER_SIZE) {
        return TERN_EMALFORMED;
    }
    rv = proto_header_decode(b, max_body, h);
    if (rv != 0) {
        return rv;
    }
    if (len - PROTO_HEADER_SIZE < h->body_len) {
        return TERN_EMALFORMED;
    }
    rv = proto_frame_verify(b, b + PROTO_HEADER_SIZE, h->body_len);
    if (rv != 0) {
        return rv;
    }
    *body = b + PROTO_HEADER_SIZE;
    return 0;
}

void proto_frame_begin(struct tern_wbuf *w,
                       uint8_t op,
                       uint64_t request_id,
                       int32_t status)
{
    proto_frame_begin_v(w, TERN_PROTO_VERSION, op, request_id, status);
}

void proto_frame_begin_v(struct tern_wbuf *w,
                         uint8_t version,
                         uint8_t op,
                         uint64_t request_id,
                         int32_t status)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    tern_put_u16(hdr + PROTO__OFF_MAGIC, PROTO_MAGIC);
    hdr[PROTO__OFF_VERSION] = version;
    hdr[PROTO__OFF_OP] = op;
    tern_put_u32(hdr + PROTO__OFF_BODY_LEN, 0);
    tern_put_u64(hdr + PROTO__OFF_REQUEST_ID, request_id);
    tern_put_u32(hdr + PROTO__OFF_STATUS, (uint32_t)status);
    tern_put_u32(hdr + PROTO__OFF_CHECKSUM, 0);
    tern_wbuf_put(w, hdr, sizeof hdr);
}

int proto_frame_end(struct tern_wbuf *w, size_t frame_start)
{
    uint8_t *hdr;
    size_t body_len;
    int rv = w->err;
    if (rv == 0 &&
        (w->len < frame_start || w->len - frame_start < PROTO_HEADER_SIZE)) {
        rv = TERN_EINVAL;
    }
    if (rv == 0) {
        body_len = w->len - frame_start - PROTO_HEADER_SIZE;
        if (body_len > UINT32_MAX) {
            rv = TERN_ETOOBIG;
        }
    }
    if (rv != 0) {
        /* Drop the partial frame; an encoding error (not ENOMEM) is not
         * sticky for the next frame. */
        if (w->len > frame_start) {
            w->len = frame_start;
        }
        if (w->err != -ENOMEM) {
            w->err = 0;
        }
        return rv;
    }
    hdr = w->base + frame_start;
    tern_put_u32(hdr + PROTO__OFF_BODY_LEN, (uint32_t)body_len);
    {
        uint32_t sum = 0;
        rv = frame_sum(hdr, hdr + PROTO_HEADER_SIZE, body_len, &sum);
        if (rv != 0) {
            w->len = frame_start; /* a version this build does not write */
            return rv;
        }
        tern_put_u32(hdr + PROTO__OFF_CHECKSUM, sum);
    }
    return 0;
}

void proto_put_str(struct tern_wbuf *w, const char *s, size_t len)
{
    if (w->err != 0) {
        return;
    }
    if (len > UINT16_MAX) {
        w->err = TERN_ETOOBIG;
        return;
    }
    tern_wbuf_u16(w, (uint16_t)len);
    tern_wbuf_put(w, s, len);
}

void proto_put_blob(struct tern_wbuf *w, const void *p, uint32_t len)
{
    tern_wbuf_u32(w, len);
    tern_wbuf_put(w, p, len);
}

const char *proto_get_str(struct tern_cursor *c, uint16_t *len)
{
    uint16_t n = tern_cursor_u16(c);
    const char *s = (const char *)tern_cursor_bytes(c, n);
    *len = s != NULL ? n : 0;
    return s;
}

const void *proto_get_blob(struct tern_cursor *c, uint32_t *len)
{
    uint32_t n = tern_cursor_u32(c);
    const void *p = tern_cursor_bytes(c, n);
    *len = p != NULL ? n : 0;
    return p;
}

/* Body fully consumed without error? */
static int cursor_finish(const struct tern_cursor *c)
{
    if (c->err != 0 || tern_cursor_left(c) != 0) {
        return TERN_EMALFORMED;
    }
    return 0;
}

/* End of a decode into out (size bytes, caller-owned): 0 when the body was
 * fully consumed without error and the decoded values are valid (ok);
 * otherwise out is zeroed and TERN_EMALFORMED returned. */
static int decode_end(const struct tern_cursor *c,
                      int ok,
                      void *out,
                      size_t size)
{
    if (cursor_finish(c) != 0 || !ok) {
        memset(out, 0, size);
        return TERN_EMALFORMED;
    }
    return 0;
}

/* Reads one variable-size record at c into item (get_fetched,
 * get_queue_info, get_member); a short record sets c->err. */
typedef void (*record_get_cb)(struct tern_cursor *c, void *item);

/* Step over n records at c with get (scratch: a record of get's type,
 * caller-owned); *raw, *raw_len: the span stepped over, borrowed from c's
 * buffer. Stops at the first error, left in c->err. */
static void records_skip(struct tern_cursor *c,
                         uint32_t n,
                         record_get_cb get,
                         void *scratch,
                         const uint8_t **raw,
                         size_t *raw_len)
{
    *raw = c->p;
    for (uint32_t i = 0; i < n && c->err == 0; i++) {
        get(c, scratch);
    }
    *raw_len = (size_t)(c->p - *raw);
}

/* Read the record at *pos of the span raw/raw_len (from records_skip) into
 * item and advance *pos: 1, or 0 at the end (or on a torn record). */
static int records_next(const uint8_t *raw,
                        size_t raw_len,
                        size_t *pos,
                        record_get_cb get,
                        void *item)
{
    struct tern_cursor c;
    if (raw == NULL || *pos >= raw_len) {
        return 0;
    }
    tern_cursor_init(&c, raw + *pos, raw_len - *pos);
    get(&c, item);
    if (c.err != 0) {
        return 0;
    }
    *pos = raw_len - tern_cursor_left(&c);
    return 1;
}

static void put_name(struct tern_wbuf *w, const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (w->err == 0 && !tern_name_valid(name, n)) {
        w->err = TERN_EBADNAME;
        return;
    }
    proto_put_str(w, name, n);
}

static void put_cstr(struct tern_wbuf *w, const char *s)
{
    proto_put_str(w, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

/* ---- Error frames ---- */

int proto_encode_error(struct tern_wbuf *w,
                       uint8_t op,
                       uint64_t request_id,
                       int32_t status,
                       const char *message,
                       uint64_t leader_id,
                       const char *leader_address)
{
    size_t start = w->len;
    size_t mlen = message != NULL ? strlen(message) : 0;
    if (status == 0) {
        return TERN_EINVAL;
    }
    if (mlen > PROTO__MAX_ERROR_MESSAGE) {
        mlen = PROTO__MAX_ERROR_MESSAGE;
    }
    proto_frame_begin(w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, status);
    proto_put_str(w, message != NULL ? message : "", mlen);
    if (status == TERN_ENOTLEADER) {
        tern_wbuf_u64(w, leader_id);
        put_cstr(w, leader_address);
    }
    return proto_frame_end(w, start);
}

int proto_decode_error(const void *body,
                       size_t len,
                       int32_t status,
                       struct proto_error *out)
{
    struct tern_cursor c;
    memset(out, 0, sizeof *out);
    if (status == 0) {
        return TERN_EINVAL;
    }
    tern_cursor_init(&c, body, len);
    out->message = proto_get_str(&c, &out->message_len);
    if (status == TERN_ENOTLEADER) {
        out->leader_id = tern_cursor_u64(&c);
        out->leader_address = proto_get_str(&c, &out->leader_address_len);
    }
    return decode_end(&c, 1, out, sizeof *out);
}

/* ---- Requests ---- */

static int get_name(struct tern_cursor *c, const char **s, uint16_t *len)
{
    *s = proto_get_str(c, len);
    if (*s == NULL) {
        return TERN_EMALFORMED;
    }
    return tern_name_valid(*s, *len) ? 0 : TERN_EBADNAME;
}

static void get_msg(struct tern_cursor *c, void *item)
{
    struct proto_msg *m = item;
    m->data = proto_get_blob(c, &m->len);
}

int proto_tag_valid(const char *t, size_t len)
{
    if (t == NULL || len == 0 || len > PROTO_MAX_TAG) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
              ch == '-')) {
            return 0;
        }
    }
    return 1;
}

/* The optional flags byte and tag filter of FETCH/GROUP_FETCH; allowed:
 * the flag bits this op may carry. */
static int get_fetch_tail(struct tern_cursor *c,
                          struct proto_request *out,
                          uint8_t allowed)
{
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 0;
    }
    out->flags = tern_cursor_u8(c);
    /* Present only when not 0: one encoding per request. */
    if (c->err != 0 || out->flags == 0 || (out->flags & ~allowed) != 0) {
        return TERN_EMALFORMED;
    }
    if ((out->flags & PROTO_FETCH_TAGS) == 0) {
        return 0;
    }
    out->n_tags = tern_cursor_u8(c);
    if (out->n_tags == 0 || out->n_tags > PROTO_MAX_FILTER_TAGS) {
        return TERN_EMALFORMED;
    }
    out->tags = c->p;
    for (uint8_t i = 0; i < out->n_tags; i++) {
        uint8_t n = tern_cursor_u8(c);
        const char *t = (const char *)tern_cursor_bytes(c, n);
        if (c->err != 0) {
            return TERN_EMALFORMED;
        }
        if (!proto_tag_valid(t, n)) {
            return TERN_EBADNAME;
        }
    }
    out->tags_len = (size_t)(c->p - out->tags);
    return 0;
}

/* PRODUCE's optional properties tail. */
static int get_produce_tail(struct tern_cursor *c, struct proto_request *out)
{
    struct proto_msg m;
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 0;
    }
    if (tern_cursor_u8(c) != PROTO_PRODUCE_PROPS) {
        return TERN_EMALFORMED;
    }
    records_skip(c, out->n_msgs, get_msg, &m, &out->props, &out->props_len);
    if (c->err != 0) {
        return TERN_EMALFORMED;
    }
    /* One encoding: a tail of empty blocks is no tail. */
    if (out->props_len == (size_t)out->n_msgs * 4) {
        return TERN_EMALFORMED;
    }
    return 0;
}

static int get_message_get(struct tern_cursor *c, struct proto_request *out)
{
    int rv = get_name(c, &out->queue, &out->queue_len);
    if (rv != 0) {
        return rv;
    }
    out->get_by = tern_cursor_u8(c);
    switch (out->get_by) {
    case PROTO_GET_ID:
        /* Queue ids start at 1; id 0 would be a second spelling of
         * PROTO_GET_OFFSET. */
        out->queue_id = tern_cursor_u64(c);
        if (c->err == 0 && out->queue_id == 0) {
            return TERN_EMALFORMED;
        }
        __attribute__((fallthrough)); /* the offset follows */
    case PROTO_GET_OFFSET:
        out->offset = tern_cursor_u64(c);
        break;
    case PROTO_GET_KEY:
        out->key = proto_get_blob(c, &out->key_len);
        out->max_count = tern_cursor_u32(c);
        if (c->err == 0 &&
            (out->key_len == 0 || out->key_len > PROTO_MAX_KEY ||
             out->max_count == 0 || out->max_count > PROTO_MESSAGE_GET_MAX)) {
            return TERN_EMALFORMED;
        }
        break;
    default:
        return TERN_EMALFORMED;
    }
    return 0;
}

int proto_pattern_valid(const char *p, size_t len)
{
    if (p == NULL || len == 0 || len > PROTO_MAX_NAME) {
        return 0;
    }
    if (p[len - 1] != '*') {
        return tern_name_valid(p, len);
    }
    /* A prefix: the name characters of tern_name_valid, possibly none. */
    return len == 1 || tern_name_valid(p, len - 1);
}

/* A user (bound PROTO_MAX_USER) or namespace (PROTO_MAX_NAMESPACE) name. */
static int get_bounded(struct tern_cursor *c,
                       const char **s,
                       uint16_t *len,
                       size_t max)
{
    int rv = get_name(c, s, len);
    return rv == 0 && *len > max ? TERN_EBADNAME : rv;
}

static int get_pattern(struct tern_cursor *c, const char **s, uint16_t *len)
{
    *s = proto_get_str(c, len);
    if (*s == NULL) {
        return TERN_EMALFORMED;
    }
    return proto_pattern_valid(*s, *len) ? 0 : TERN_EBADNAME;
}

/* A cursor name of a paged list: "" (from the start) or a valid name of
 * at most max bytes. */
static int get_after(struct tern_cursor *c,
                     const char **s,
                     uint16_t *len,
                     size_t max)
{
    *s = proto_get_str(c, len);
    if (*s == NULL) {
        return TERN_EMALFORMED;
    }
    return *len == 0 || (*len <= max && tern_name_valid(*s, *len))
               ? 0
               : TERN_EBADNAME;
}

/* The paging tail of a list request (proto.h), if any bytes are left:
 * the cursor (a name of at most max bytes; ACL_LIST: a grant's user,
 * namespace and pattern, all "" or all valid), then u32 max_count. */
static int get_list_tail(struct tern_cursor *c,
                         struct proto_request *out,
                         size_t max)
{
    int rv;
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 0; /* unpaged: an older client */
    }
    out->paged = 1;
    rv = get_after(c, &out->after, &out->after_len, max);
    if (rv == 0 && out->op == PROTO_OP_ACL_LIST) {
        out->after_ns = proto_get_str(c, &out->after_ns_len);
        out->after_pattern = proto_get_str(c, &out->after_pattern_len);
        if (out->after_ns == NULL || out->after_pattern == NULL) {
            rv = TERN_EMALFORMED;
        } else if (out->after_len == 0
                       ? out->after_ns_len != 0 || out->after_pattern_len != 0
                       : out->after_ns_len > PROTO_MAX_NAMESPACE ||
                             !tern_name_valid(out->after_ns,
                                              out->after_ns_len) ||
                             !proto_pattern_valid(out->after_pattern,
                                                  out->after_pattern_len)) {
            rv = TERN_EBADNAME;
        }
    }
    out->max_count = tern_cursor_u32(c);
    return rv;
}

/* Request bodies of ops 10..19 (layouts in proto.h). */
static int decode_security(struct tern_cursor *c, struct proto_request *out)
{
    int rv = 0;
    switch (out->op) {
    case PROTO_OP_USER_SET:
        rv = get_bounded(c, &out->user, &out->user_len, PROTO_MAX_USER);
        out->bits = tern_cursor_u32(c);
        out->cred = proto_get_blob(c, &out->cred_len);
        if (rv == 0 && c->err == 0 &&
            ((out->bits & ~(PROTO_USER_ADMIN | PROTO_USER_CERT)) != 0 ||
             out->cred_len > PROTO_MAX_CREDENTIAL ||
             (out->cred_len == 0 && (out->bits & PROTO_USER_CERT) == 0))) {
            rv = TERN_EINVAL;
        }
        break;
    case PROTO_OP_USER_DELETE:
        rv = get_bounded(c, &out->user, &out->user_len, PROTO_MAX_USER);
        break;
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
        rv = get_bounded(c, &out->user, &out->user_len, PROTO_MAX_USER);
        if (rv == 0) {
            rv = get_bounded(c, &out->ns, &out->ns_len, PROTO_MAX_NAMESPACE);
        }
        if (rv == 0) {
            rv = get_pattern(c, &out->pattern, &out->pattern_len);
        }
        if (rv == 0 && out->op == PROTO_OP_ACL_SET) {
            out->bits = tern_cursor_u32(c);
            if (c->err == 0 &&
                (out->bits == 0 || (out->bits & ~PROTO_PERM_ALL) != 0)) {
                rv = TERN_EINVAL;
            }
        }
        break;
    case PROTO_OP_ACL_LIST:
        out->user = proto_get_str(c, &out->user_len);
        if (out->user == NULL) {
            rv = TERN_EMALFORMED;
        } else if (out->user_len > 0 &&
                   (out->user_len > PROTO_MAX_USER ||
                    !tern_name_valid(out->user, out->user_len))) {
            rv = TERN_EBADNAME;
        }
        if (rv == 0) {
            rv = get_list_tail(c, out, PROTO_MAX_USER);
        }
        break;
    case PROTO_OP_USER_LIST:
        rv = get_list_tail(c, out, PROTO_MAX_USER);
        break;
    case PROTO_OP_NAMESPACE_LIST:
        rv = get_list_tail(c, out, PROTO_MAX_NAMESPACE);
        break;
    case PROTO_OP_NAMESPACE_SET:
        rv = get_bounded(c, &out->ns, &out->ns_len, PROTO_MAX_NAMESPACE);
        out->max_queues = tern_cursor_u64(c);
        out->max_bytes_quota = tern_cursor_u64(c);
        out->produce_bytes_per_s = tern_cursor_u64(c);
        break;
    case PROTO_OP_NAMESPACE_DELETE:
        rv = get_bounded(c, &out->ns, &out->ns_len, PROTO_MAX_NAMESPACE);
        break;
    default: /* PRODUCER_INIT: empty */
        break;
    }
    return rv;
}

/* A mechanism name: 1..PROTO_MAX_MECHANISM bytes of [A-Z0-9_-]. */
static int mechanism_ok(const char *m, size_t len)
{
    if (m == NULL || len == 0 || len > PROTO_MAX_MECHANISM) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = m[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_')) {
            return 0;
        }
    }
    return 1;
}

/* Request bodies of ops 20..21 (layouts in proto.h). */
static int decode_auth(struct tern_cursor *c, struct proto_request *out)
{
    int rv = 0;
    if (out->op == PROTO_OP_AUTH_START) {
        out->mechanism = proto_get_str(c, &out->mechanism_len);
        out->ns = proto_get_str(c, &out->ns_len);
        if (c->err != 0) {
            return TERN_EMALFORMED;
        }
        if (!mechanism_ok(out->mechanism, out->mechanism_len)) {
            return TERN_EINVAL;
        }
        if (out->ns_len > 0 && (out->ns_len > PROTO_MAX_NAMESPACE ||
                                !tern_name_valid(out->ns, out->ns_len))) {
            return TERN_EBADNAME;
        }
    }
    out->auth_data = proto_get_blob(c, &out->auth_data_len);
    if (c->err == 0 && out->auth_data_len > PROTO_MAX_AUTH_DATA) {
        rv = TERN_EINVAL;
    }
    return rv;
}

/* settings of QUEUE_CREATE's tail and QUEUE_UPDATE (layout in proto.h). */
static int get_settings(struct tern_cursor *c, struct proto_queue_settings *s)
{
    s->max_age_ms = tern_cursor_u64(c);
    s->max_bytes = tern_cursor_u64(c);
    s->max_messages = tern_cursor_u64(c);
    s->overflow = tern_cursor_u8(c);
    return c->err != 0 || s->overflow > 1 ? TERN_EMALFORMED : 0;
}

static void put_settings(struct tern_wbuf *w,
                         const struct proto_queue_settings *s)
{
    tern_wbuf_u64(w, s->max_age_ms);
    tern_wbuf_u64(w, s->max_bytes);
    tern_wbuf_u64(w, s->max_messages);
    tern_wbuf_u8(w, s->overflow);
}

int proto_encode_queue_create(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const struct proto_queue_settings *s)
{
    size_t start = w->len;
    if (s != NULL && s->overflow > 1) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_QUEUE_CREATE, request_id, 0);
    put_name(w, queue);
    if (s != NULL) {
        put_settings(w, s);
    }
    return proto_frame_end(w, start);
}

int proto_encode_queue_update(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              uint32_t mask,
                              const struct proto_queue_settings *s)
{
    size_t start = w->len;
    if (s == NULL || mask == 0 || (mask & ~PROTO_SET_ALL) != 0 ||
        s->overflow > 1) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_QUEUE_UPDATE, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u32(w, mask);
    put_settings(w, s);
    return proto_frame_end(w, start);
}

int proto_encode_queue_info_req(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *queue)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_QUEUE_INFO, request_id, 0);
    put_name(w, queue);
    return proto_frame_end(w, start);
}

int proto_encode_offset_for_time(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const char *queue,
                                 uint64_t time_ms)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_OFFSET_FOR_TIME, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u64(w, time_ms);
    return proto_frame_end(w, start);
}

int proto_encode_queue_info_resp(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const struct proto_queue_info_resp *q)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_QUEUE_INFO | PROTO_OP_RESPONSE, request_id,
                      0);
    tern_wbuf_u64(w, q->start_offset);
    tern_wbuf_u64(w, q->next_offset);
    tern_wbuf_u64(w, q->bytes);
    tern_wbuf_u64(w, q->created_index);
    put_settings(w, &q->settings);
    return proto_frame_end(w, start);
}

int proto_decode_queue_info_resp(const void *body,
                                 size_t len,
                                 struct proto_queue_info_resp *out)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    memset(out, 0, sizeof *out);
    out->start_offset = tern_cursor_u64(&c);
    out->next_offset = tern_cursor_u64(&c);
    out->bytes = tern_cursor_u64(&c);
    out->created_index = tern_cursor_u64(&c);
    int rv = get_settings(&c, &out->settings);
    if (rv == 0) {
        rv = cursor_finish(&c);
    }
    if (rv == 0 && out->start_offset > out->next_offset) {
        rv = TERN_EMALFORMED;
    }
    return rv;
}

int proto_encode_offset_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             uint64_t offset)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_OFFSET_FOR_TIME | PROTO_OP_RESPONSE,
                      request_id, 0);
    tern_wbuf_u64(w, offset);
    return proto_frame_end(w, start);
}

int proto_decode_offset_resp(const void *body, size_t len, uint64_t *offset)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *offset = tern_cursor_u64(&c);
    return cursor_finish(&c);
}

/* ---- Shared groups (ops 27..29) ---- */

static void get_settle_item(struct tern_cursor *c, void *item)
{
    struct proto_settle_item *it = item;
    it->offset = tern_cursor_u64(c);
    it->count = tern_cursor_u32(c);
    it->action = tern_cursor_u8(c);
    it->delay_ms = tern_cursor_u64(c);
}

static int settle_item_ok(const struct proto_settle_item *it)
{
    if (it->action > PROTO_SETTLE_RETRY) {
        return 0;
    }
    return !((it->action == PROTO_SETTLE_ACK ||
              it->action == PROTO_SETTLE_RELEASE ||
              it->action == PROTO_SETTLE_RETRY) &&
             it->delay_ms != 0);
}

/* SETTLE's items: each valid, offsets strictly increasing. */
static int get_settle_items(struct tern_cursor *c, struct proto_request *out)
{
    struct proto_settle_item it;
    uint64_t prev = 0;
    out->n_items = tern_cursor_u32(c);
    if (c->err != 0 || out->n_items == 0 ||
        out->n_items > PROTO_SHARED_LIST_MAX) {
        return TERN_EMALFORMED;
    }
    out->items = c->p;
    for (uint32_t i = 0; i < out->n_items; i++) {
        get_settle_item(c, &it);
        if (c->err != 0 || !settle_item_ok(&it) ||
            (i > 0 && it.offset <= prev)) {
            return TERN_EMALFORMED;
        }
        prev = it.offset;
    }
    out->items_len = (size_t)(c->p - out->items);
    return 0;
}

static int decode_shared(struct tern_cursor *c, struct proto_request *out)
{
    struct proto_shared_settings *s = &out->shared;
    int rv = get_name(c, &out->queue, &out->queue_len);
    if (rv == 0) {
        rv = get_name(c, &out->group, &out->group_len);
    }
    if (rv != 0) {
        return rv;
    }
    switch (out->op) {
    case PROTO_OP_SHARED_CONFIG:
        out->set_mask = tern_cursor_u32(c);
        s->ack_timeout_ms = tern_cursor_u64(c);
        s->max_deliveries = tern_cursor_u32(c);
        s->window = tern_cursor_u32(c);
        s->dlq = proto_get_str(c, &s->dlq_len);
        if (c->err != 0 || s->dlq == NULL ||
            (out->set_mask & ~PROTO_SHARED_SET_ALL) != 0) {
            return TERN_EMALFORMED;
        }
        /* One encoding: fields outside the mask are zero. */
        if (((out->set_mask & PROTO_SHARED_SET_ACK_TIMEOUT) == 0 &&
             s->ack_timeout_ms != 0) ||
            ((out->set_mask & PROTO_SHARED_SET_MAX_DELIVERIES) == 0 &&
             s->max_deliveries != 0) ||
            ((out->set_mask & PROTO_SHARED_SET_WINDOW) == 0 &&
             s->window != 0) ||
            ((out->set_mask & PROTO_SHARED_SET_DLQ) == 0 && s->dlq_len != 0)) {
            return TERN_EMALFORMED;
        }
        if (s->dlq_len > 0 && !tern_name_valid(s->dlq, s->dlq_len)) {
            return TERN_EBADNAME;
        }
        return 0;
    case PROTO_OP_RECEIVE:
        out->consumer_id = tern_cursor_u64(c);
        out->max_msgs = tern_cursor_u32(c);
        out->wait_ms = tern_cursor_u32(c);
        if (c->err == 0 && (out->consumer_id == 0 || out->max_msgs == 0 ||
                            out->max_msgs > PROTO_SHARED_LIST_MAX)) {
            return TERN_EMALFORMED;
        }
        return 0;
    default: /* SETTLE */
        return get_settle_items(c, out);
    }
}

/* CLAIM (op 30): names, action, lease. */
static int decode_claim(struct tern_cursor *c, struct proto_request *out)
{
    int rv = get_name(c, &out->queue, &out->queue_len);
    if (rv == 0) {
        rv = get_name(c, &out->group, &out->group_len);
    }
    if (rv != 0) {
        return rv;
    }
    out->consumer_id = tern_cursor_u64(c);
    out->flags = tern_cursor_u8(c);
    out->lease_ms = tern_cursor_u32(c);
    /* The encoder's rules: a consumer id, and acquire, or release with
     * lease 0. */
    bool action_ok = out->flags == PROTO_CLAIM_ACQUIRE ||
                     (out->flags == PROTO_CLAIM_RELEASE && out->lease_ms == 0);
    if (c->err == 0 && (out->consumer_id == 0 || !action_ok)) {
        return TERN_EMALFORMED;
    }
    return 0;
}

int proto_encode_claim(struct tern_wbuf *w,
                       uint64_t request_id,
                       const char *queue,
                       const char *group,
                       uint64_t consumer_id,
                       uint8_t action,
                       uint32_t lease_ms)
{
    size_t start = w->len;
    if (consumer_id == 0 ||
        (action != PROTO_CLAIM_ACQUIRE &&
         (action != PROTO_CLAIM_RELEASE || lease_ms != 0))) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_CLAIM, request_id, 0);
    put_name(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, consumer_id);
    tern_wbuf_u8(w, action);
    tern_wbuf_u32(w, lease_ms);
    return proto_frame_end(w, start);
}

int proto_encode_claim_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t granted,
                            uint64_t holder,
                            uint64_t until_ms)
{
    size_t start = w->len;
    if (granted > 1) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_CLAIM | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u8(w, granted);
    tern_wbuf_u64(w, holder);
    tern_wbuf_u64(w, until_ms);
    return proto_frame_end(w, start);
}

int proto_decode_claim_resp(const void *body,
                            size_t len,
                            uint8_t *granted,
                            uint64_t *holder,
                            uint64_t *until_ms)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *granted = tern_cursor_u8(&c);
    *holder = tern_cursor_u64(&c);
    *until_ms = tern_cursor_u64(&c);
    int rc = cursor_finish(&c);
    if (rc == 0 && *granted > 1) {
        rc = TERN_EMALFORMED;
    }
    if (rc != 0) {
        *granted = 0;
        *holder = 0;
        *until_ms = 0;
    }
    return rc;
}

int proto_next_settle(const struct proto_request *r,
                      size_t *pos,
                      struct proto_settle_item *it)
{
    return records_next(r->items, r->items_len, pos, get_settle_item, it);
}

int proto_encode_shared_config(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               const char *group,
                               uint32_t mask,
                               const struct proto_shared_settings *s)
{
    static const struct proto_shared_settings none = {0};
    size_t start = w->len;
    const char *dlq;
    size_t dlq_len;
    if ((mask & ~PROTO_SHARED_SET_ALL) != 0 || (s == NULL && mask != 0)) {
        return TERN_EINVAL;
    }
    if (s == NULL) {
        s = &none;
    }
    dlq = (mask & PROTO_SHARED_SET_DLQ) != 0 && s->dlq != NULL ? s->dlq : "";
    dlq_len = strlen(dlq);
    if (dlq_len > 0 && !tern_name_valid(dlq, dlq_len)) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, PROTO_OP_SHARED_CONFIG, request_id, 0);
    put_name(w, queue);
    put_name(w, group);
    tern_wbuf_u32(w, mask);
    tern_wbuf_u64(
        w, (mask & PROTO_SHARED_SET_ACK_TIMEOUT) != 0 ? s->ack_timeout_ms : 0);
    tern_wbuf_u32(w, (mask & PROTO_SHARED_SET_MAX_DELIVERIES) != 0
                         ? s->max_deliveries
                         : 0);
    tern_wbuf_u32(w, (mask & PROTO_SHARED_SET_WINDOW) != 0 ? s->window : 0);
    proto_put_str(w, dlq, dlq_len);
    return proto_frame_end(w, start);
}

int proto_encode_receive(struct tern_wbuf *w,
                         uint64_t request_id,
                         const char *queue,
                         const char *group,
                         uint64_t consumer_id,
                         uint32_t max_msgs,
                         uint32_t wait_ms)
{
    size_t start = w->len;
    if (consumer_id == 0 || max_msgs == 0 || max_msgs > PROTO_SHARED_LIST_MAX) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_RECEIVE, request_id, 0);
    put_name(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, consumer_id);
    tern_wbuf_u32(w, max_msgs);
    tern_wbuf_u32(w, wait_ms);
    return proto_frame_end(w, start);
}

int proto_encode_settle(struct tern_wbuf *w,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        const struct proto_settle_item *items,
                        uint32_t n)
{
    size_t start = w->len;
    if (items == NULL || n == 0 || n > PROTO_SHARED_LIST_MAX) {
        return TERN_EINVAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!settle_item_ok(&items[i]) ||
            (i > 0 && items[i].offset <= items[i - 1].offset)) {
            return TERN_EINVAL;
        }
    }
    proto_frame_begin(w, PROTO_OP_SETTLE, request_id, 0);
    put_name(w, queue);
    put_name(w, group);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        tern_wbuf_u64(w, items[i].offset);
        tern_wbuf_u32(w, items[i].count);
        tern_wbuf_u8(w, items[i].action);
        tern_wbuf_u64(w, items[i].delay_ms);
    }
    return proto_frame_end(w, start);
}

/* An optional flags byte that ends a request (STATUS, MESSAGE_TRACE):
 * absent, or not 0 and within allowed. */
/* An address of MEMBER: 1..PROTO_MEMBER_ADDR_MAX printable bytes, no ','
 * nor space. */
static bool member_addr_valid(const char *a, size_t len)
{
    if (a == NULL || len == 0 || len > PROTO_MEMBER_ADDR_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (a[i] <= ' ' || a[i] > '~' || a[i] == ',') {
            return false;
        }
    }
    return true;
}

static int decode_member(struct tern_cursor *c, struct proto_request *out)
{
    out->flags = tern_cursor_u8(c);
    out->member_id = tern_cursor_u64(c);
    out->raft_address = proto_get_str(c, &out->raft_address_len);
    out->client_address = proto_get_str(c, &out->client_address_len);
    out->wait_ms = tern_cursor_u32(c);
    if (c->err != 0) {
        return TERN_EMALFORMED;
    }
    if (out->member_id == 0) {
        return TERN_EMALFORMED;
    }
    switch (out->flags) {
    case PROTO_MEMBER_ADD:
        return member_addr_valid(out->raft_address, out->raft_address_len) &&
                       member_addr_valid(out->client_address,
                                         out->client_address_len)
                   ? 0
                   : TERN_EMALFORMED;
    case PROTO_MEMBER_REMOVE:
        return out->raft_address_len == 0 && out->client_address_len == 0 &&
                       out->wait_ms == 0
                   ? 0
                   : TERN_EMALFORMED;
    default:
        return TERN_EMALFORMED;
    }
}

int proto_encode_member_req(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t action,
                            uint64_t id,
                            const char *raft_address,
                            const char *client_address,
                            uint32_t timeout_ms)
{
    size_t start = w->len;
    size_t rl = raft_address != NULL ? strlen(raft_address) : 0;
    size_t cl = client_address != NULL ? strlen(client_address) : 0;
    if (id == 0 ||
        (action == PROTO_MEMBER_ADD &&
         (!member_addr_valid(raft_address, rl) ||
          !member_addr_valid(client_address, cl))) ||
        (action == PROTO_MEMBER_REMOVE &&
         (rl != 0 || cl != 0 || timeout_ms != 0)) ||
        (action != PROTO_MEMBER_ADD && action != PROTO_MEMBER_REMOVE)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_MEMBER, request_id, 0);
    tern_wbuf_u8(w, action);
    tern_wbuf_u64(w, id);
    proto_put_str(w, raft_address != NULL ? raft_address : "", (uint16_t)rl);
    proto_put_str(w, client_address != NULL ? client_address : "",
                  (uint16_t)cl);
    tern_wbuf_u32(w, timeout_ms);
    return proto_frame_end(w, start);
}

int proto_encode_member_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             uint8_t role)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_MEMBER | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u8(w, role);
    return proto_frame_end(w, start);
}

int proto_decode_member_resp(const void *body, size_t len, uint8_t *role)
{
    struct tern_cursor c;
    int rc;
    tern_cursor_init(&c, body, len);
    *role = tern_cursor_u8(&c);
    rc = cursor_finish(&c);
    if (rc == 0 && *role > PROTO_MEMBER_ABSENT) {
        rc = TERN_EMALFORMED;
    }
    return rc;
}

static int get_flags_tail(struct tern_cursor *c,
                          struct proto_request *out,
                          uint8_t allowed)
{
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 0;
    }
    out->flags = tern_cursor_u8(c);
    return out->flags == 0 || (out->flags & ~allowed) != 0 ? TERN_EMALFORMED
                                                           : 0;
}

int proto_decode_request(uint8_t op,
                         const void *body,
                         size_t len,
                         struct proto_request *out)
{
    struct tern_cursor c;
    struct proto_msg m;
    int rv = 0;
    memset(out, 0, sizeof *out);
    out->op = op;
    tern_cursor_init(&c, body, len);
    switch (op) {
    case PROTO_OP_QUEUE_CREATE:
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv == 0 && c.err == 0 && tern_cursor_left(&c) > 0) {
            out->has_settings = 1;
            rv = get_settings(&c, &out->settings);
        }
        break;
    case PROTO_OP_QUEUE_DELETE:
    case PROTO_OP_QUEUE_INFO:
        rv = get_name(&c, &out->queue, &out->queue_len);
        break;
    case PROTO_OP_QUEUE_UPDATE:
        rv = get_name(&c, &out->queue, &out->queue_len);
        out->set_mask = tern_cursor_u32(&c);
        if (rv == 0) {
            rv = get_settings(&c, &out->settings);
        }
        if (rv == 0 && c.err == 0 &&
            (out->set_mask == 0 || (out->set_mask & ~PROTO_SET_ALL) != 0)) {
            rv = TERN_EMALFORMED;
        }
        break;
    case PROTO_OP_OFFSET_FOR_TIME:
        rv = get_name(&c, &out->queue, &out->queue_len);
        out->time_ms = tern_cursor_u64(&c);
        break;
    case PROTO_OP_QUEUE_LIST:
        rv = get_list_tail(&c, out, PROTO_MAX_NAME);
        break;
    case PROTO_OP_STATUS:
        rv = get_flags_tail(&c, out, PROTO_STATUS_TIMERS);
        break;
    case PROTO_OP_MEMBER:
        rv = decode_member(&c, out);
        break;
    case PROTO_OP_GROUP_STATUS:
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv == 0) {
            rv = get_after(&c, &out->group, &out->group_len, PROTO_MAX_NAME);
        }
        if (rv == 0) {
            rv = get_after(&c, &out->after, &out->after_len, PROTO_MAX_NAME);
        }
        out->max_count = tern_cursor_u32(&c);
        break;
    case PROTO_OP_PRODUCE: {
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv != 0) {
            break;
        }
        out->producer_id = tern_cursor_u64(&c);
        out->seq = tern_cursor_u64(&c);
        out->n_msgs = tern_cursor_u32(&c);
        if (c.err != 0) {
            break;
        }
        /* Validate every blob now so proto_next_msg can trust the bytes. */
        records_skip(&c, out->n_msgs, get_msg, &m, &out->msgs, &out->msgs_len);
        if (c.err == 0 && out->n_msgs == 0) {
            rv = TERN_EINVAL;
        }
        if (rv == 0) {
            rv = get_produce_tail(&c, out);
        }
        break;
    }
    case PROTO_OP_PRODUCE_DELAYED:
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv != 0) {
            break;
        }
        out->time_ms = tern_cursor_u64(&c);
        if ((out->time_ms & PROTO_DELAY_DEDUP) != 0) {
            out->time_ms &= ~PROTO_DELAY_DEDUP;
            out->producer_id = tern_cursor_u64(&c);
            out->seq = tern_cursor_u64(&c);
            if (c.err == 0 && (out->producer_id == 0 || out->seq == 0)) {
                rv = TERN_EINVAL;
                break;
            }
        }
        out->n_msgs = tern_cursor_u32(&c);
        if (c.err != 0) {
            break;
        }
        records_skip(&c, out->n_msgs, get_msg, &m, &out->msgs, &out->msgs_len);
        if (c.err == 0 && out->n_msgs == 0) {
            rv = TERN_EINVAL;
        }
        if (rv == 0) {
            rv = get_produce_tail(&c, out);
        }
        break;
    case PROTO_OP_FETCH:
        rv = get_name(&c, &out->queue, &out->queue_len);
        out->offset = tern_cursor_u64(&c);
        out->max_msgs = tern_cursor_u32(&c);
        out->max_bytes = tern_cursor_u32(&c);
        out->wait_ms = tern_cursor_u32(&c);
        if (rv == 0) {
            rv = get_fetch_tail(
                &c, out,
                PROTO_FETCH_LEADER | PROTO_FETCH_PROPS | PROTO_FETCH_TAGS);
        }
        break;
    case PROTO_OP_GROUP_FETCH:
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv == 0) {
            rv = get_name(&c, &out->group, &out->group_len);
        }
        out->max_msgs = tern_cursor_u32(&c);
        out->max_bytes = tern_cursor_u32(&c);
        out->wait_ms = tern_cursor_u32(&c);
        if (rv == 0) {
            rv = get_fetch_tail(&c, out,
                                PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_PROPS |
                                    PROTO_FETCH_TAGS);
        }
        break;
    case PROTO_OP_MESSAGE_GET:
        rv = get_message_get(&c, out);
        break;
    case PROTO_OP_MESSAGE_TRACE:
        rv = get_name(&c, &out->queue, &out->queue_len);
        out->offset = tern_cursor_u64(&c);
        if (rv == 0) {
            rv = get_flags_tail(&c, out, PROTO_TRACE_DELIVERIES);
        }
        break;
    case PROTO_OP_SHARED_CONFIG:
    case PROTO_OP_RECEIVE:
    case PROTO_OP_SETTLE:
        rv = decode_shared(&c, out);
        break;
    case PROTO_OP_CLAIM:
        rv = decode_claim(&c, out);
        break;
    case PROTO_OP_GROUP_COMMIT:
        rv = get_name(&c, &out->queue, &out->queue_len);
        if (rv == 0) {
            rv = get_name(&c, &out->group, &out->group_len);
        }
        out->offset = tern_cursor_u64(&c);
        break;
    case PROTO_OP_CLUSTER_TRANSFER:
        out->to_id = tern_cursor_u64(&c);
        break;
    case PROTO_OP_STATS:
        out->flags = tern_cursor_u8(&c);
        if (c.err == 0 &&
            (out->flags & ~(PROTO_STATS_RESET | PROTO_STATS_STAGES)) != 0) {
            rv = TERN_EMALFORMED;
        }
        break;
    case PROTO_OP_USER_SET:
    case PROTO_OP_USER_DELETE:
    case PROTO_OP_USER_LIST:
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
    case PROTO_OP_ACL_LIST:
    case PROTO_OP_NAMESPACE_SET:
    case PROTO_OP_NAMESPACE_DELETE:
    case PROTO_OP_NAMESPACE_LIST:
    case PROTO_OP_PRODUCER_INIT:
        rv = decode_security(&c, out);
        break;
    case PROTO_OP_AUTH_START:
    case PROTO_OP_AUTH_CONTINUE:
        rv = decode_auth(&c, out);
        break;
    case PROTO_OP_HELLO:
        /* Fields a later client appends after the features are skipped. */
        out->bits = tern_cursor_u32(&c);
        if (c.err == 0) {
            (void)tern_cursor_bytes(&c, tern_cursor_left(&c));
        }
        break;
    case PROTO_OP_BACKUP:
        out->flags = tern_cursor_u8(&c);
        out->path = proto_get_str(&c, &out->path_len);
        out->min_applied = tern_cursor_u64(&c);
        if (c.err == 0 &&
            ((out->flags & ~PROTO_BACKUP_VERIFY) != 0 || out->path_len == 0 ||
             out->path_len > PROTO_BACKUP_PATH_MAX ||
             memchr(out->path, '\0', out->path_len) != NULL)) {
            rv = TERN_EMALFORMED;
        }
        break;
    default:
        rv = TERN_EINVAL;
        break;
    }
    if (rv == 0) {
        rv = cursor_finish(&c);
    }
    if (rv != 0) {
        memset(out, 0, sizeof *out);
        out->op = op;
    }
    return rv;
}

int proto_next_msg(const struct proto_request *r,
                   size_t *pos,
                   struct proto_msg *m)
{
    return records_next(r->msgs, r->msgs_len, pos, get_msg, m);
}

int proto_next_props(const struct proto_request *r,
                     size_t *pos,
                     struct proto_msg *m)
{
    return records_next(r->props, r->props_len, pos, get_msg, m);
}

int proto_next_tag(const struct proto_request *r,
                   size_t *pos,
                   const char **tag,
                   uint8_t *len)
{
    struct tern_cursor c;
    if (r->tags == NULL || *pos >= r->tags_len) {
        return 0;
    }
    tern_cursor_init(&c, r->tags + *pos, r->tags_len - *pos);
    *len = tern_cursor_u8(&c);
    *tag = (const char *)tern_cursor_bytes(&c, *len);
    if (c.err != 0) {
        return 0;
    }
    *pos = r->tags_len - tern_cursor_left(&c);
    return 1;
}

int proto_encode_queue_op(struct tern_wbuf *w,
                          uint8_t op,
                          uint64_t request_id,
                          const char *queue)
{
    size_t start = w->len;
    if (op != PROTO_OP_QUEUE_CREATE && op != PROTO_OP_QUEUE_DELETE) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, op, request_id, 0);
    put_name(w, queue);
    return proto_frame_end(w, start);
}

static void msg_array_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    *m = ((const struct proto_msg *)msgs)[i];
}

int proto_encode_produce(struct tern_wbuf *w,
                         uint64_t request_id,
                         const char *queue,
                         uint64_t producer_id,
                         uint64_t seq,
                         const struct proto_msg *msgs,
                         uint32_t n)
{
    return proto_encode_produce_at(w, request_id, queue, producer_id, seq,
                                   msg_array_at, msgs, n);
}

int proto_encode_produce_at(struct tern_wbuf *w,
                            uint64_t request_id,
                            const char *queue,
                            uint64_t producer_id,
                            uint64_t seq,
                            proto_msg_at_cb at,
                            const void *msgs,
                            uint32_t n)
{
    size_t start = w->len;
    if (n == 0 || msgs == NULL || at == NULL) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_PRODUCE, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u64(w, producer_id);
    tern_wbuf_u64(w, seq);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        struct proto_msg m;
        at(msgs, i, &m);
        proto_put_blob(w, m.data, m.len);
    }
    return proto_frame_end(w, start);
}

/* The messages of a PRODUCE or PRODUCE_DELAYED body, then the
 * properties tail (flag byte and one block per message) when any
 * message has properties. */
static void put_msgs_props(struct tern_wbuf *w,
                           proto_pmsg_at_cb at,
                           const void *msgs,
                           uint32_t n)
{
    struct proto_msg m, p;
    bool props = false;
    for (uint32_t i = 0; i < n; i++) {
        at(msgs, i, &m, &p);
        proto_put_blob(w, m.data, m.len);
        props = props || p.len > 0;
    }
    if (props) {
        tern_wbuf_u8(w, PROTO_PRODUCE_PROPS);
        for (uint32_t i = 0; i < n; i++) {
            at(msgs, i, &m, &p);
            proto_put_blob(w, p.data, p.len);
        }
    }
}

int proto_encode_produce_props(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               uint64_t producer_id,
                               uint64_t seq,
                               proto_pmsg_at_cb at,
                               const void *msgs,
                               uint32_t n)
{
    size_t start = w->len;
    if (n == 0 || msgs == NULL || at == NULL) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_PRODUCE, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u64(w, producer_id);
    tern_wbuf_u64(w, seq);
    tern_wbuf_u32(w, n);
    put_msgs_props(w, at, msgs, n);
    return proto_frame_end(w, start);
}

int proto_encode_produce_delayed(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const char *queue,
                                 uint64_t when,
                                 uint64_t producer_id,
                                 uint64_t seq,
                                 proto_pmsg_at_cb at,
                                 const void *msgs,
                                 uint32_t n)
{
    size_t start = w->len;
    if (n == 0 || msgs == NULL || at == NULL ||
        (when & PROTO_DELAY_DEDUP) != 0 || (producer_id != 0 && seq == 0)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_PRODUCE_DELAYED, request_id, 0);
    put_name(w, queue);
    if (producer_id != 0) {
        tern_wbuf_u64(w, when | PROTO_DELAY_DEDUP);
        tern_wbuf_u64(w, producer_id);
        tern_wbuf_u64(w, seq);
    } else {
        tern_wbuf_u64(w, when);
    }
    tern_wbuf_u32(w, n);
    put_msgs_props(w, at, msgs, n);
    return proto_frame_end(w, start);
}

int proto_encode_fetch_filtered(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *queue,
                                const char *group,
                                uint64_t offset,
                                uint32_t max_msgs,
                                uint32_t max_bytes,
                                uint32_t wait_ms,
                                const struct proto_fetch_filter *f)
{
    size_t start = w->len;
    uint8_t flags = f != NULL ? f->flags : 0;
    uint32_t n_tags = f != NULL ? f->n_tags : 0;
    uint8_t allowed = group != NULL
                          ? PROTO_FETCH_PROPS | PROTO_GROUP_FETCH_SKIPPED
                          : PROTO_FETCH_PROPS | PROTO_FETCH_LEADER;
    if ((flags & ~allowed) != 0 || n_tags > PROTO_MAX_FILTER_TAGS ||
        (n_tags > 0 && f->tags == NULL)) {
        return TERN_EINVAL;
    }
    for (uint32_t i = 0; i < n_tags; i++) {
        if (f->tags[i] == NULL ||
            !proto_tag_valid(f->tags[i],
                             strnlen(f->tags[i], PROTO_MAX_TAG + 1))) {
            return TERN_EBADNAME;
        }
    }
    if (n_tags > 0) {
        flags |= PROTO_FETCH_TAGS;
    }
    proto_frame_begin(w, group != NULL ? PROTO_OP_GROUP_FETCH : PROTO_OP_FETCH,
                      request_id, 0);
    put_name(w, queue);
    if (group != NULL) {
        put_name(w, group);
    } else {
        tern_wbuf_u64(w, offset);
    }
    tern_wbuf_u32(w, max_msgs);
    tern_wbuf_u32(w, max_bytes);
    tern_wbuf_u32(w, wait_ms);
    if (flags != 0) {
        tern_wbuf_u8(w, flags);
    }
    if (n_tags > 0) {
        tern_wbuf_u8(w, (uint8_t)n_tags);
        for (uint32_t i = 0; i < n_tags; i++) {
            size_t n = strlen(f->tags[i]);
            tern_wbuf_u8(w, (uint8_t)n);
            tern_wbuf_put(w, f->tags[i], n);
        }
    }
    return proto_frame_end(w, start);
}

int proto_encode_message_get(struct tern_wbuf *w,
                             uint64_t request_id,
                             const char *queue,
                             uint64_t queue_id,
                             uint64_t offset,
                             const void *key,
                             uint32_t key_len,
                             uint32_t max)
{
    size_t start = w->len;
    if (key != NULL && (key_len == 0 || key_len > PROTO_MAX_KEY || max == 0 ||
                        max > PROTO_MESSAGE_GET_MAX)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_MESSAGE_GET, request_id, 0);
    put_name(w, queue);
    if (key != NULL) {
        tern_wbuf_u8(w, PROTO_GET_KEY);
        proto_put_blob(w, key, key_len);
        tern_wbuf_u32(w, max);
    } else if (queue_id != 0) {
        tern_wbuf_u8(w, PROTO_GET_ID);
        tern_wbuf_u64(w, queue_id);
        tern_wbuf_u64(w, offset);
    } else {
        tern_wbuf_u8(w, PROTO_GET_OFFSET);
        tern_wbuf_u64(w, offset);
    }
    return proto_frame_end(w, start);
}

int proto_encode_fetch(struct tern_wbuf *w,
                       uint64_t request_id,
                       const char *queue,
                       uint64_t offset,
                       uint32_t max_msgs,
                       uint32_t max_bytes,
                       uint32_t wait_ms,
                       uint8_t flags)
{
    struct proto_fetch_filter f = {.flags = flags};
    if ((flags & ~PROTO_FETCH_LEADER) != 0) {
        return TERN_EINVAL;
    }
    return proto_encode_fetch_filtered(w, request_id, queue, NULL, offset,
                                       max_msgs, max_bytes, wait_ms, &f);
}

int proto_encode_group_fetch(struct tern_wbuf *w,
                             uint64_t request_id,
                             const char *queue,
                             const char *group,
                             uint32_t max_msgs,
                             uint32_t max_bytes,
                             uint32_t wait_ms)
{
    return proto_encode_group_fetch_flags(w, request_id, queue, group, max_msgs,
                                          max_bytes, wait_ms, 0);
}

int proto_encode_group_fetch_flags(struct tern_wbuf *w,
                                   uint64_t request_id,
                                   const char *queue,
                                   const char *group,
                                   uint32_t max_msgs,
                                   uint32_t max_bytes,
                                   uint32_t wait_ms,
                                   uint8_t flags)
{
    struct proto_fetch_filter f = {.flags = flags};
    if ((flags & ~PROTO_GROUP_FETCH_SKIPPED) != 0) {
        return TERN_EINVAL;
    }
    if (group == NULL) {
        return TERN_EBADNAME; /* NULL would ask for a FETCH */
    }
    return proto_encode_fetch_filtered(w, request_id, queue, group, 0, max_msgs,
                                       max_bytes, wait_ms, &f);
}

int proto_encode_group_commit(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const char *group,
                              uint64_t next_offset)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_GROUP_COMMIT, request_id, 0);
    put_name(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, next_offset);
    return proto_frame_end(w, start);
}

int proto_encode_simple(struct tern_wbuf *w, uint8_t op, uint64_t request_id)
{
    size_t start = w->len;
    if (op != PROTO_OP_QUEUE_LIST && op != PROTO_OP_STATUS &&
        op != PROTO_OP_USER_LIST && op != PROTO_OP_NAMESPACE_LIST &&
        op != PROTO_OP_PRODUCER_INIT) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, op, request_id, 0);
    return proto_frame_end(w, start);
}

int proto_encode_queue_list_req(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *after,
                                uint32_t max_count)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_QUEUE_LIST, request_id, 0);
    if (after != NULL && after[0] != '\0') {
        put_name(w, after);
    } else {
        proto_put_str(w, "", 0);
    }
    tern_wbuf_u32(w, max_count);
    return proto_frame_end(w, start);
}

/* ---- Responses ---- */

int proto_encode_empty_resp(struct tern_wbuf *w,
                            uint8_t op,
                            uint64_t request_id)
{
    size_t start = w->len;
    proto_frame_begin(w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, 0);
    return proto_frame_end(w, start);
}

int proto_decode_empty_resp(const void *body, size_t len)
{
    (void)body;
    return len == 0 ? 0 : TERN_EMALFORMED;
}

int proto_encode_produce_resp(struct tern_wbuf *w,
                              uint64_t request_id,
                              uint64_t base_offset,
                              uint32_t count,
                              int duplicate)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_PRODUCE | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u64(w, base_offset);
    tern_wbuf_u32(w, count);
    tern_wbuf_u8(w, duplicate ? 1 : 0);
    return proto_frame_end(w, start);
}

int proto_decode_produce_resp(const void *body,
                              size_t len,
                              struct proto_produce_resp *out)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    out->base_offset = tern_cursor_u64(&c);
    out->count = tern_cursor_u32(&c);
    out->duplicate = tern_cursor_u8(&c);
    return decode_end(&c, out->duplicate <= 1, out, sizeof *out);
}

int proto_encode_produce_delayed_resp(struct tern_wbuf *w,
                                      uint64_t request_id,
                                      uint32_t count,
                                      uint64_t due_ms)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_PRODUCE_DELAYED | PROTO_OP_RESPONSE,
                      request_id, 0);
    tern_wbuf_u32(w, count);
    tern_wbuf_u64(w, due_ms);
    return proto_frame_end(w, start);
}

int proto_decode_produce_delayed_resp(const void *body,
                                      size_t len,
                                      uint32_t *count,
                                      uint64_t *due_ms)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *count = tern_cursor_u32(&c);
    *due_ms = tern_cursor_u64(&c);
    return cursor_finish(&c);
}

/* One message record of a fetch answer: u64 offset, u64 timestamp_ms, u32 len,
 * data[len], with_props: u32 props_len, props[props_len]. One reserve for the
 * whole record: a consumer's answer carries thousands of small ones. */
static void put_fetched(struct tern_wbuf *w,
                        const struct proto_fetched_msg *m,
                        bool with_props)
{
    size_t n =
        20 + (size_t)m->len + (with_props ? 4 + (size_t)m->props_len : 0);
    uint8_t *d = tern_wbuf_reserve(w, n);
    if (d == NULL) {
        return;
    }
    tern_put_u64(d, m->offset);
    tern_put_u64(d + 8, m->timestamp_ms);
    tern_put_u32(d + 16, m->len);
    if (m->len > 0) {
        memcpy(d + 20, m->data, m->len);
    }
    if (with_props) {
        d += 20 + m->len;
        tern_put_u32(d, m->props_len);
        if (m->props_len > 0) {
            memcpy(d + 4, m->props, m->props_len);
        }
    }
    w->len += n;
}

/* u32 n, then the n message records of msgs (borrowed). */
static void put_fetched_list(struct tern_wbuf *w,
                             const struct proto_fetched_msg *msgs,
                             uint32_t n,
                             bool with_props)
{
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        put_fetched(w, &msgs[i], with_props);
    }
}

/* FETCH/GROUP_FETCH answer; with_props: each record with its properties,
 * and queue_id after the records. */
static int encode_fetch_answer(struct tern_wbuf *w,
                               uint8_t op,
                               uint64_t request_id,
                               uint64_t next_offset,
                               uint64_t end_offset,
                               const struct proto_fetched_msg *msgs,
                               uint32_t n,
                               bool with_props,
                               uint64_t queue_id)
{
    size_t start = w->len;
    if (op != PROTO_OP_FETCH && op != PROTO_OP_GROUP_FETCH) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, 0);
    tern_wbuf_u64(w, next_offset);
    tern_wbuf_u64(w, end_offset);
    put_fetched_list(w, msgs, n, with_props);
    if (with_props) {
        tern_wbuf_u64(w, queue_id);
    }
    return proto_frame_end(w, start);
}

int proto_encode_fetch_resp(struct tern_wbuf *w,
                            uint8_t op,
                            uint64_t request_id,
                            uint64_t next_offset,
                            uint64_t end_offset,
                            const struct proto_fetched_msg *msgs,
                            uint32_t n)
{
    return encode_fetch_answer(w, op, request_id, next_offset, end_offset, msgs,
                               n, false, 0);
}

static void get_fetched(struct tern_cursor *c, void *item)
{
    struct proto_fetched_msg *m = item;
    m->offset = tern_cursor_u64(c);
    m->timestamp_ms = tern_cursor_u64(c);
    m->data = proto_get_blob(c, &m->len);
    m->props = NULL;
    m->props_len = 0;
}

static void get_fetched_props(struct tern_cursor *c, void *item)
{
    struct proto_fetched_msg *m = item;
    get_fetched(c, m);
    m->props = proto_get_blob(c, &m->props_len);
}

/* A RECEIVE record: a message with properties, then its count. */
struct received
{
    struct proto_fetched_msg m;
    uint32_t count;
};
static void get_received(struct tern_cursor *c, void *item);

void proto_put_fetched(struct tern_wbuf *w,
                       const struct proto_fetched_msg *m,
                       bool with_props)
{
    put_fetched(w, m, with_props);
}

int proto_encode_fetch_props_resp(struct tern_wbuf *w,
                                  uint8_t op,
                                  uint64_t request_id,
                                  uint64_t next_offset,
                                  uint64_t end_offset,
                                  const struct proto_fetched_msg *msgs,
                                  uint32_t n,
                                  uint64_t queue_id)
{
    return encode_fetch_answer(w, op, request_id, next_offset, end_offset, msgs,
                               n, true, queue_id);
}

int proto_encode_message_get_resp(struct tern_wbuf *w,
                                  uint64_t request_id,
                                  uint64_t queue_id,
                                  const struct proto_fetched_msg *msgs,
                                  uint32_t n)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_MESSAGE_GET | PROTO_OP_RESPONSE, request_id,
                      0);
    tern_wbuf_u64(w, queue_id);
    put_fetched_list(w, msgs, n, true);
    return proto_frame_end(w, start);
}

/* u32 n, then n message records (with_props: with their properties) into
 * out->n, out->msgs and out->msgs_len. */
static void get_fetched_list(struct tern_cursor *c,
                             struct proto_fetch_resp *out,
                             bool with_props)
{
    struct proto_fetched_msg m;
    out->with_props = with_props ? 1 : 0;
    out->n = tern_cursor_u32(c);
    records_skip(c, out->n, with_props ? get_fetched_props : get_fetched, &m,
                 &out->msgs, &out->msgs_len);
}

/* FETCH/GROUP_FETCH answer; with_props: records with properties, then
 * queue_id. */
static int decode_fetch_answer(const void *body,
                               size_t len,
                               struct proto_fetch_resp *out,
                               bool with_props)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    memset(out, 0, sizeof *out);
    out->next_offset = tern_cursor_u64(&c);
    out->end_offset = tern_cursor_u64(&c);
    get_fetched_list(&c, out, with_props);
    if (with_props) {
        out->queue_id = tern_cursor_u64(&c);
    }
    return decode_end(&c, 1, out, sizeof *out);
}

int proto_decode_fetch_resp(const void *body,
                            size_t len,
                            struct proto_fetch_resp *out)
{
    return decode_fetch_answer(body, len, out, false);
}

int proto_decode_fetch_props_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out)
{
    return decode_fetch_answer(body, len, out, true);
}

int proto_decode_message_get_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    memset(out, 0, sizeof *out);
    out->queue_id = tern_cursor_u64(&c);
    get_fetched_list(&c, out, true);
    return decode_end(&c, 1, out, sizeof *out);
}

int proto_next_fetched(const struct proto_fetch_resp *r,
                       size_t *pos,
                       struct proto_fetched_msg *m)
{
    if (r->runs) {
        return 0;
    }
    if (r->with_counts) {
        uint32_t count;
        return proto_next_received(r, pos, m, &count);
    }
    return records_next(r->msgs, r->msgs_len, pos,
                        r->with_props ? get_fetched_props : get_fetched, m);
}

/* ---- The runs layout of FETCH answers (PROTO_FEATURE_RUNS) ---- */

/* Part header sizes: kind, offset, timestamp, then count and len (a run)
 * or the message's blob length (a message). */
#define PROTO__RUN_HEAD 25u
#define PROTO__MSG_HEAD 21u

size_t proto_fetch_runs_begin(struct tern_wbuf *w,
                              uint8_t version,
                              uint64_t request_id,
                              uint64_t end_offset)
{
    size_t start = w->len;
    proto_frame_begin_v(w, version, PROTO_OP_FETCH | PROTO_OP_RESPONSE,
                        request_id, 0);
    tern_wbuf_u64(w, 0); /* next_offset */
    tern_wbuf_u64(w, end_offset);
    tern_wbuf_u32(w, 0); /* n */
    tern_wbuf_u32(w, 0); /* n_parts */
    return start;
}

void proto_put_fetch_run(struct tern_wbuf *w,
                         uint64_t offset,
                         uint64_t timestamp_ms,
                         uint32_t count,
                         bool props,
                         const void *list,
                         size_t list_len)
{
    uint8_t *d;
    if (list_len > UINT32_MAX) {
        if (w->err == 0) {
            w->err = TERN_ETOOBIG;
        }
        return;
    }
    d = tern_wbuf_reserve(w, PROTO__RUN_HEAD + list_len);
    if (d == NULL) {
        return;
    }
    d[0] = (uint8_t)(props ? PROTO_PART_RUN_PROPS : PROTO_PART_RUN);
    tern_put_u64(d + 1, offset);
    tern_put_u64(d + 9, timestamp_ms);
    tern_put_u32(d + 17, count);
    tern_put_u32(d + 21, (uint32_t)list_len);
    if (list_len > 0) {
        memcpy(d + PROTO__RUN_HEAD, list, list_len);
    }
    w->len += PROTO__RUN_HEAD + list_len;
}

void proto_put_fetch_message(struct tern_wbuf *w,
                             const struct proto_fetched_msg *m)
{
    tern_wbuf_u8(w, PROTO_PART_MESSAGE);
    put_fetched(w, m, true);
}

int proto_fetch_runs_end(struct tern_wbuf *w,
                         size_t start,
                         uint64_t next_offset,
                         uint32_t n,
                         uint32_t n_parts,
                         uint64_t queue_id)
{
    if (w->err == 0) {
        uint8_t *b = w->base + start + PROTO_HEADER_SIZE;
        tern_put_u64(b, next_offset);
        tern_put_u32(b + 16, n);
        tern_put_u32(b + 20, n_parts);
    }
    tern_wbuf_u64(w, queue_id);
    return proto_frame_end(w, start);
}

/* One message of a run at c: {u32 len, bytes[, u32 props_len, props]}. */
static void get_run_msg(struct tern_cursor *c,
                        bool props,
                        struct proto_fetched_msg *m)
{
    m->data = proto_get_blob(c, &m->len);
    m->props = NULL;
    m->props_len = 0;
    if (props) {
        m->props = proto_get_blob(c, &m->props_len);
    }
}

/* One part of the runs layout, as read by get_part (pointers into the
 * body). */
struct part
{
    uint8_t kind;
    uint64_t offset;
    uint64_t ts;
    uint32_t count;      /* runs */
    const uint8_t *list; /* runs: the messages' bytes */
    uint32_t list_len;
    struct proto_fetched_msg m; /* PROTO_PART_MESSAGE: its message */
};

/* Read the part at c into *p (its framing only; of an unknown kind only
 * the head, the rest of *p zero). */
static void get_part(struct tern_cursor *c, struct part *p)
{
    memset(p, 0, sizeof *p);
    p->kind = tern_cursor_u8(c);
    p->offset = tern_cursor_u64(c);
    p->ts = tern_cursor_u64(c);
    if (p->kind == PROTO_PART_MESSAGE) {
        p->m.data = proto_get_blob(c, &p->m.len);
        p->m.props = proto_get_blob(c, &p->m.props_len);
    } else if (p->kind == PROTO_PART_RUN || p->kind == PROTO_PART_RUN_PROPS) {
        p->count = tern_cursor_u32(c);
        p->list_len = tern_cursor_u32(c);
        p->list = tern_cursor_bytes(c, p->list_len);
    }
}

/* Check the part at c: its framing, its messages' offsets above *last (1
 * + the last offset seen; 0 before any), adding its messages to *n. 0, or
 * TERN_EMALFORMED. */
static int check_part(struct tern_cursor *c, uint64_t *last, uint64_t *n)
{
    struct part p;
    struct proto_fetched_msg m;
    struct tern_cursor lc;
    get_part(c, &p);
    if (c->err != 0 || p.offset < *last) {
        return TERN_EMALFORMED;
    }
    if (p.kind == PROTO_PART_MESSAGE) {
        p.count = 1;
    } else if (p.kind != PROTO_PART_RUN && p.kind != PROTO_PART_RUN_PROPS) {
        return TERN_EMALFORMED;
    } else {
        tern_cursor_init(&lc, p.list, p.list_len);
        for (uint32_t i = 0; i < p.count && lc.err == 0; i++) {
            get_run_msg(&lc, p.kind == PROTO_PART_RUN_PROPS, &m);
        }
        if (cursor_finish(&lc) != 0) {
            return TERN_EMALFORMED; /* short, or bytes past its count */
        }
    }
    if (p.count == 0 || p.offset + p.count <= p.offset) {
        return TERN_EMALFORMED; /* empty, or offsets that wrap */
    }
    *last = p.offset + p.count;
    *n += p.count;
    return 0;
}

int proto_decode_fetch_runs_resp(const void *body,
                                 size_t len,
                                 bool with_props,
                                 struct proto_fetch_resp *out)
{
    struct tern_cursor c;
    uint64_t last = 0, n = 0;
    int ok = 1;
    tern_cursor_init(&c, body, len);
    memset(out, 0, sizeof *out);
    out->runs = 1;
    out->with_props = with_props ? 1 : 0;
    out->next_offset = tern_cursor_u64(&c);
    out->end_offset = tern_cursor_u64(&c);
    out->n = tern_cursor_u32(&c);
    out->n_parts = tern_cursor_u32(&c);
    out->msgs = c.p;
    for (uint32_t i = 0; i < out->n_parts && ok && c.err == 0; i++) {
        ok = check_part(&c, &last, &n) == 0;
    }
    if (c.err == 0) {
        out->msgs_len = (size_t)(c.p - out->msgs);
    }
    out->queue_id = tern_cursor_u64(&c);
    ok = ok && n == out->n && (out->n_parts == 0) == (n == 0) &&
         out->n_parts <= n;
    return decode_end(&c, ok, out, sizeof *out);
}

/* m's properties as r shows them: only when asked for, NULL when none. */
static void props_as_asked(const struct proto_fetch_resp *r,
                           struct proto_fetched_msg *m)
{
    if (!r->with_props || m->props_len == 0) {
        m->props = NULL;
        m->props_len = 0;
    }
}

int proto_fetch_iter_next(const struct proto_fetch_resp *r,
                          struct proto_fetch_iter *it,
                          struct proto_fetched_msg *m)
{
    struct tern_cursor c;
    if (!r->runs) {
        if (r->with_counts) {
            uint32_t count;
            return proto_next_received(r, &it->pos, m, &count);
        }
        return proto_next_fetched(r, &it->pos, m);
    }
    if (r->msgs == NULL) {
        return 0;
    }
    if (it->left == 0) {
        struct part p;
        if (it->pos >= r->msgs_len) {
            return 0;
        }
        tern_cursor_init(&c, r->msgs + it->pos, r->msgs_len - it->pos);
        get_part(&c, &p);
        if (c.err != 0) {
            return 0;
        }
        if (p.kind == PROTO_PART_MESSAGE) {
            *m = p.m;
            m->offset = p.offset;
            m->timestamp_ms = p.ts;
            props_as_asked(r, m);
            it->pos = r->msgs_len - tern_cursor_left(&c);
            return 1;
        }
        if (p.count == 0) {
            return 0;
        }
        it->offset = p.offset;
        it->ts = p.ts;
        it->props = p.kind == PROTO_PART_RUN_PROPS;
        it->left = p.count;
        it->pos = (size_t)(p.list - r->msgs);
        it->run_end = it->pos + p.list_len;
    }
    tern_cursor_init(&c, r->msgs + it->pos, it->run_end - it->pos);
    get_run_msg(&c, it->props, m);
    if (c.err != 0) {
        it->left = 0;
        return 0;
    }
    props_as_asked(r, m);
    m->offset = it->offset++;
    m->timestamp_ms = it->ts;
    it->pos = it->run_end - tern_cursor_left(&c);
    if (--it->left == 0) {
        it->pos = it->run_end; /* decode checked the run ends there */
    }
    return 1;
}

void proto_put_group_skip(struct tern_wbuf *w, const struct proto_group_skip *s)
{
    tern_wbuf_u64(w, s->skipped);
    tern_wbuf_u64(w, s->first_offset);
}

int proto_encode_group_fetch_skip_resp(struct tern_wbuf *w,
                                       uint64_t request_id,
                                       uint64_t next_offset,
                                       uint64_t end_offset,
                                       const struct proto_fetched_msg *msgs,
                                       uint32_t n,
                                       const struct proto_group_skip *s)
{
    size_t start = w->len;
    int rv = proto_encode_fetch_resp(w, PROTO_OP_GROUP_FETCH, request_id,
                                     next_offset, end_offset, msgs, n);
    if (rv != 0) {
        return rv;
    }
    /* Sealing again recomputes body_len and the checksum. */
    proto_put_group_skip(w, s);
    return proto_frame_end(w, start);
}

int proto_decode_group_fetch_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out,
                                  struct proto_group_skip *skip,
                                  size_t *fetch_len)
{
    struct tern_cursor c;
    size_t head;
    int rv = TERN_EMALFORMED;
    memset(skip, 0, sizeof *skip);
    if (fetch_len != NULL) {
        *fetch_len = 0;
    }
    if (len < PROTO_GROUP_SKIP_SIZE) {
        memset(out, 0, sizeof *out);
        return TERN_EMALFORMED;
    }
    head = len - PROTO_GROUP_SKIP_SIZE;
    tern_cursor_init(&c, (const uint8_t *)body + head, PROTO_GROUP_SKIP_SIZE);
    skip->skipped = tern_cursor_u64(&c);
    skip->first_offset = tern_cursor_u64(&c);
    if (cursor_finish(&c) == 0 && skip->skipped <= skip->first_offset) {
        rv = proto_decode_fetch_resp(body, head, out);
    } else {
        memset(out, 0, sizeof *out);
    }
    if (rv != 0) {
        memset(skip, 0, sizeof *skip);
        return rv;
    }
    if (fetch_len != NULL) {
        *fetch_len = head;
    }
    return 0;
}

/* The more byte that ends a paged list answer, if any bytes are left:
 * *paged 1 and *more read; 0 when that byte is not 0 or 1, else 1. */
static int get_more_tail(struct tern_cursor *c, uint8_t *paged, uint8_t *more)
{
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 1;
    }
    *paged = 1;
    *more = tern_cursor_u8(c);
    return *more <= 1;
}

/* more < 0: the unpaged answer (no more byte). */
static int encode_queue_list(struct tern_wbuf *w,
                             uint64_t request_id,
                             const struct proto_queue_info *q,
                             uint32_t n,
                             int more)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_QUEUE_LIST | PROTO_OP_RESPONSE, request_id,
                      0);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        proto_put_str(w, q[i].name, q[i].name_len);
        tern_wbuf_u64(w, q[i].start_offset);
        tern_wbuf_u64(w, q[i].next_offset);
    }
    if (more >= 0) {
        tern_wbuf_u8(w, more != 0 ? 1 : 0);
    }
    return proto_frame_end(w, start);
}

int proto_encode_queue_list_resp(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const struct proto_queue_info *q,
                                 uint32_t n)
{
    return encode_queue_list(w, request_id, q, n, -1);
}

int proto_encode_queue_list_page_resp(struct tern_wbuf *w,
                                      uint64_t request_id,
                                      const struct proto_queue_info *q,
                                      uint32_t n,
                                      int more)
{
    return encode_queue_list(w, request_id, q, n, more != 0 ? 1 : 0);
}

static void get_queue_info(struct tern_cursor *c, void *item)
{
    struct proto_queue_info *q = item;
    q->name = proto_get_str(c, &q->name_len);
    q->start_offset = tern_cursor_u64(c);
    q->next_offset = tern_cursor_u64(c);
}

int proto_decode_queue_list_resp(const void *body,
                                 size_t len,
                                 struct proto_queue_list_resp *out)
{
    struct tern_cursor c;
    struct proto_queue_info q;
    tern_cursor_init(&c, body, len);
    out->n = tern_cursor_u32(&c);
    records_skip(&c, out->n, get_queue_info, &q, &out->entries,
                 &out->entries_len);
    out->paged = 0;
    out->more = 0;
    int ok = get_more_tail(&c, &out->paged, &out->more);
    return decode_end(&c, ok, out, sizeof *out);
}

int proto_next_queue_info(const struct proto_queue_list_resp *r,
                          size_t *pos,
                          struct proto_queue_info *q)
{
    return records_next(r->entries, r->entries_len, pos, get_queue_info, q);
}

int proto_encode_status_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const struct proto_status *st)
{
    size_t start = w->len;
    if (st->has_timers && st->server_version_len > PROTO_MAX_SERVER_VERSION) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_STATUS | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u64(w, st->node_id);
    tern_wbuf_u8(w, st->role);
    tern_wbuf_u64(w, st->leader_id);
    proto_put_str(w, st->leader_address, st->leader_address_len);
    tern_wbuf_u64(w, st->term);
    tern_wbuf_u64(w, st->commit_index);
    tern_wbuf_u64(w, st->last_applied);
    tern_wbuf_u8(w, st->writable);
    proto_put_str(w, st->transport, st->transport_len);
    proto_put_str(w, st->durability, st->durability_len);
    tern_wbuf_u32(w, st->n_members);
    for (uint32_t i = 0; i < st->n_members; i++) {
        const struct proto_member *m = &st->members[i];
        tern_wbuf_u64(w, m->id);
        proto_put_str(w, m->raft_address, m->raft_address_len);
        proto_put_str(w, m->client_address, m->client_address_len);
    }
    if (st->has_timers) {
        tern_wbuf_u8(w, st->has_membership ? PROTO_STATUS_TAIL_VERSION_MEMBERS
                                           : PROTO_STATUS_TAIL_VERSION);
        tern_wbuf_u64(w, st->timers_pending);
        tern_wbuf_u64(w, st->timers_oldest_due_ms);
        proto_put_str(w, st->server_version != NULL ? st->server_version : "",
                      st->server_version != NULL ? st->server_version_len : 0);
        if (st->has_membership) {
            tern_wbuf_u8(w, st->self_role);
            tern_wbuf_u32(w, st->n_members);
            tern_wbuf_put(w, st->member_roles, st->n_members);
        }
    }
    return proto_frame_end(w, start);
}

static void get_member(struct tern_cursor *c, void *item)
{
    struct proto_member *m = item;
    m->id = tern_cursor_u64(c);
    m->raft_address = proto_get_str(c, &m->raft_address_len);
    m->client_address = proto_get_str(c, &m->client_address_len);
}

int proto_decode_status_resp(const void *body,
                             size_t len,
                             struct proto_status *out)
{
    struct tern_cursor c;
    struct proto_member m;
    memset(out, 0, sizeof *out);
    tern_cursor_init(&c, body, len);
    out->node_id = tern_cursor_u64(&c);
    out->role = tern_cursor_u8(&c);
    out->leader_id = tern_cursor_u64(&c);
    out->leader_address = proto_get_str(&c, &out->leader_address_len);
    out->term = tern_cursor_u64(&c);
    out->commit_index = tern_cursor_u64(&c);
    out->last_applied = tern_cursor_u64(&c);
    out->writable = tern_cursor_u8(&c);
    out->transport = proto_get_str(&c, &out->transport_len);
    out->durability = proto_get_str(&c, &out->durability_len);
    out->n_members = tern_cursor_u32(&c);
    records_skip(&c, out->n_members, get_member, &m, &out->members_raw,
                 &out->members_raw_len);
    int ok = 1;
    out->server_version = "";
    if (c.err == 0 && tern_cursor_left(&c) > 0) {
        /* The tail: version 1 fields (timers), version 2 adds the server
         * version; a later version's extra fields are skipped. */
        uint8_t version = tern_cursor_u8(&c);
        out->has_timers = 1;
        out->timers_pending = tern_cursor_u64(&c);
        out->timers_oldest_due_ms = tern_cursor_u64(&c);
        ok = version >= 1;
        if (version >= 2) {
            const char *v = proto_get_str(&c, &out->server_version_len);
            out->server_version = v != NULL ? v : "";
            ok = ok && out->server_version_len <= PROTO_MAX_SERVER_VERSION;
        }
        if (c.err == 0 && version >= PROTO_STATUS_TAIL_VERSION_MEMBERS) {
            out->has_membership = 1;
            out->self_role = tern_cursor_u8(&c);
            out->n_member_roles = tern_cursor_u32(&c);
            if (c.err == 0 && (out->n_member_roles != out->n_members ||
                               out->self_role > PROTO_MEMBER_ABSENT)) {
                ok = 0;
            }
            out->member_roles =
                ok ? tern_cursor_bytes(&c, out->n_member_roles) : NULL;
        }
        if (c.err == 0 && ok && version > PROTO_STATUS_TAIL_VERSION_MEMBERS) {
            (void)tern_cursor_bytes(&c, tern_cursor_left(&c));
        }
    }
    return decode_end(&c, ok, out, sizeof *out);
}

int proto_next_member(const struct proto_status *st,
                      size_t *pos,
                      struct proto_member *m)
{
    return records_next(st->members_raw, st->members_raw_len, pos, get_member,
                        m);
}

/* ---- In-place rewrites (libtern re-sends) ---- */

/* Recompute the checksum of a frame whose length matched its header;
 * TERN_EVERSION (frame unchanged) for a version this build does not
 * write. */
static int reseal(uint8_t *frame, size_t body_len)
{
    uint32_t sum;
    int rv = frame_sum(frame, frame + PROTO_HEADER_SIZE, body_len, &sum);
    if (rv == 0) {
        tern_put_u32(frame + PROTO__OFF_CHECKSUM, sum);
    }
    return rv;
}

int proto_frame_set_request_id(void *frame, size_t len, uint64_t request_id)
{
    uint8_t *f = frame;
    if (len < PROTO_HEADER_SIZE ||
        len - PROTO_HEADER_SIZE != tern_get_u32(f + PROTO__OFF_BODY_LEN)) {
        return TERN_EMALFORMED;
    }
    tern_put_u64(f + PROTO__OFF_REQUEST_ID, request_id);
    return reseal(f, len - PROTO_HEADER_SIZE);
}

int proto_frame_seal_request(void *frame,
                             size_t len,
                             uint64_t request_id,
                             uint8_t version)
{
    uint8_t *f = frame;
    if (len < PROTO_HEADER_SIZE ||
        len - PROTO_HEADER_SIZE != tern_get_u32(f + PROTO__OFF_BODY_LEN)) {
        return TERN_EMALFORMED;
    }
    if (version != TERN_PROTO_VERSION && version != PROTO_VERSION_XXH3) {
        return TERN_EVERSION;
    }
    f[PROTO__OFF_VERSION] = version;
    tern_put_u64(f + PROTO__OFF_REQUEST_ID, request_id);
    return reseal(f, len - PROTO_HEADER_SIZE);
}

int proto_produce_append(struct tern_wbuf *w,
                         proto_msg_at_cb at,
                         const void *msgs,
                         uint32_t n)
{
    size_t old = w->len, count_at, qlen;
    uint32_t count;
    if (w->err != 0) {
        return w->err;
    }
    if (old < PROTO_HEADER_SIZE + 2 ||
        w->base[PROTO__OFF_OP] != PROTO_OP_PRODUCE ||
        old - PROTO_HEADER_SIZE !=
            tern_get_u32(w->base + PROTO__OFF_BODY_LEN)) {
        return TERN_EMALFORMED;
    }
    qlen = tern_get_u16(w->base + PROTO_HEADER_SIZE);
    count_at = PROTO_HEADER_SIZE + 2 + qlen + 16;
    if (old < count_at + 4 || n == 0 || at == NULL) {
        return TERN_EMALFORMED;
    }
    count = tern_get_u32(w->base + count_at);
    if (count > UINT32_MAX - n) {
        return TERN_ETOOBIG;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct proto_msg m;
        at(msgs, i, &m);
        proto_put_blob(w, m.data, m.len);
    }
    if (w->err != 0 || w->len - PROTO_HEADER_SIZE > UINT32_MAX) {
        int rv = w->err != 0 ? w->err : TERN_ETOOBIG;
        w->len = old; /* the frame as it was, still whole */
        w->err = 0;
        return rv;
    }
    tern_put_u32(w->base + count_at, count + n);
    tern_put_u32(w->base + PROTO__OFF_BODY_LEN,
                 (uint32_t)(w->len - PROTO_HEADER_SIZE));
    return 0;
}

int proto_frame_set_producer(void *frame,
                             size_t len,
                             uint64_t producer_id,
                             uint64_t seq)
{
    uint8_t *f = frame;
    size_t qlen;
    if (len < PROTO_HEADER_SIZE + 2 || f[PROTO__OFF_OP] != PROTO_OP_PRODUCE ||
        len - PROTO_HEADER_SIZE != tern_get_u32(f + PROTO__OFF_BODY_LEN)) {
        return TERN_EMALFORMED;
    }
    qlen = tern_get_u16(f + PROTO_HEADER_SIZE);
    if (len < PROTO_HEADER_SIZE + 2 + qlen + 16) {
        return TERN_EMALFORMED;
    }
    tern_put_u64(f + PROTO_HEADER_SIZE + 2 + qlen, producer_id);
    tern_put_u64(f + PROTO_HEADER_SIZE + 2 + qlen + 8, seq);
    return reseal(f, len - PROTO_HEADER_SIZE);
}

/* ---- STATS ---- */

int proto_encode_stats_req(struct tern_wbuf *w,
                           uint64_t request_id,
                           uint8_t flags)
{
    size_t start = w->len;
    if ((flags & ~(PROTO_STATS_RESET | PROTO_STATS_STAGES)) != 0) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_STATS, request_id, 0);
    tern_wbuf_u8(w, flags);
    return proto_frame_end(w, start);
}

int proto_encode_stats_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            const struct proto_stats *st)
{
    size_t start = w->len;
    if (st->has_stages) {
        if (st->n_stages > PROTO_STATS_MAX_STAGES) {
            return TERN_EINVAL;
        }
        for (unsigned i = 0; i < st->n_stages; i++) {
            if (st->stages[i].name_len > PROTO_STATS_MAX_STAGE_NAME) {
                return TERN_EINVAL;
            }
        }
    }
    proto_frame_begin(w, PROTO_OP_STATS | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u64(w, st->node_id);
    tern_wbuf_u8(w, st->role);
    proto_put_str(w, st->transport, st->transport_len);
    proto_put_str(w, st->durability, st->durability_len);
    tern_wbuf_u64(w, st->count);
    tern_wbuf_u64(w, st->dropped);
    tern_wbuf_u64(w, st->sum_ns);
    tern_wbuf_u64(w, st->min_ns);
    tern_wbuf_u64(w, st->p50_ns);
    tern_wbuf_u64(w, st->p90_ns);
    tern_wbuf_u64(w, st->p99_ns);
    tern_wbuf_u64(w, st->p999_ns);
    tern_wbuf_u64(w, st->max_ns);
    if (st->has_stages) {
        tern_wbuf_u8(w, PROTO_STATS_TAIL_VERSION);
        tern_wbuf_u8(w, st->n_stages);
        for (unsigned i = 0; i < st->n_stages; i++) {
            const struct proto_stats_stage *sg = &st->stages[i];
            proto_put_str(w, sg->name != NULL ? sg->name : "",
                          sg->name != NULL ? sg->name_len : 0);
            tern_wbuf_u64(w, sg->count);
            tern_wbuf_u64(w, sg->p50_ns);
            tern_wbuf_u64(w, sg->p99_ns);
        }
    }
    return proto_frame_end(w, start);
}

int proto_decode_stats_resp(const void *body,
                            size_t len,
                            struct proto_stats *out)
{
    struct tern_cursor c;
    memset(out, 0, sizeof *out);
    tern_cursor_init(&c, body, len);
    out->node_id = tern_cursor_u64(&c);
    out->role = tern_cursor_u8(&c);
    out->transport = proto_get_str(&c, &out->transport_len);
    out->durability = proto_get_str(&c, &out->durability_len);
    out->count = tern_cursor_u64(&c);
    out->dropped = tern_cursor_u64(&c);
    out->sum_ns = tern_cursor_u64(&c);
    out->min_ns = tern_cursor_u64(&c);
    out->p50_ns = tern_cursor_u64(&c);
    out->p90_ns = tern_cursor_u64(&c);
    out->p99_ns = tern_cursor_u64(&c);
    out->p999_ns = tern_cursor_u64(&c);
    out->max_ns = tern_cursor_u64(&c);
    int ok = 1;
    if (c.err == 0 && tern_cursor_left(&c) > 0) {
        /* The stage tail: version 2 (the answer without a tail is
         * version 1); a later version's extra fields are skipped. */
        uint8_t version = tern_cursor_u8(&c);
        out->has_stages = 1;
        out->n_stages = tern_cursor_u8(&c);
        ok = version >= PROTO_STATS_TAIL_VERSION &&
             out->n_stages <= PROTO_STATS_MAX_STAGES;
        for (unsigned i = 0; ok && c.err == 0 && i < out->n_stages; i++) {
            struct proto_stats_stage *sg = &out->stages[i];
            sg->name = proto_get_str(&c, &sg->name_len);
            sg->count = tern_cursor_u64(&c);
            sg->p50_ns = tern_cursor_u64(&c);
            sg->p99_ns = tern_cursor_u64(&c);
            ok = sg->name_len <= PROTO_STATS_MAX_STAGE_NAME;
        }
        if (ok && c.err == 0 && version > PROTO_STATS_TAIL_VERSION) {
            (void)tern_cursor_bytes(&c, tern_cursor_left(&c));
        }
    }
    return decode_end(&c, ok, out, sizeof *out);
}

/* ---- Security metadata (ops 10..19) ---- */

static int name_ok(const char *s, size_t max)
{
    size_t n = s != NULL ? strlen(s) : 0;
    return n <= max && tern_name_valid(s, n);
}

int proto_encode_user_set(struct tern_wbuf *w,
                          uint64_t request_id,
                          const char *user,
                          uint32_t flags,
                          const void *cred,
                          uint32_t cred_len)
{
    size_t start = w->len;
    if (!name_ok(user, PROTO_MAX_USER)) {
        return TERN_EBADNAME;
    }
    if ((flags & ~(PROTO_USER_ADMIN | PROTO_USER_CERT)) != 0 ||
        cred_len > PROTO_MAX_CREDENTIAL || (cred_len > 0 && cred == NULL) ||
        (cred_len == 0 && (flags & PROTO_USER_CERT) == 0)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_USER_SET, request_id, 0);
    put_cstr(w, user);
    tern_wbuf_u32(w, flags);
    proto_put_blob(w, cred, cred_len);
    return proto_frame_end(w, start);
}

int proto_encode_name_op(struct tern_wbuf *w,
                         uint8_t op,
                         uint64_t request_id,
                         const char *name)
{
    size_t start = w->len;
    size_t max;
    if (op == PROTO_OP_USER_DELETE) {
        max = PROTO_MAX_USER;
    } else if (op == PROTO_OP_NAMESPACE_DELETE) {
        max = PROTO_MAX_NAMESPACE;
    } else {
        return TERN_EINVAL;
    }
    if (!name_ok(name, max)) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, op, request_id, 0);
    put_cstr(w, name);
    return proto_frame_end(w, start);
}

int proto_encode_acl_op(struct tern_wbuf *w,
                        uint8_t op,
                        uint64_t request_id,
                        const char *user,
                        const char *ns,
                        const char *pattern,
                        uint32_t perms)
{
    size_t start = w->len;
    if (op != PROTO_OP_ACL_SET && op != PROTO_OP_ACL_DELETE) {
        return TERN_EINVAL;
    }
    if (!name_ok(user, PROTO_MAX_USER) || !name_ok(ns, PROTO_MAX_NAMESPACE) ||
        pattern == NULL || !proto_pattern_valid(pattern, strlen(pattern))) {
        return TERN_EBADNAME;
    }
    if (op == PROTO_OP_ACL_SET &&
        (perms == 0 || (perms & ~PROTO_PERM_ALL) != 0)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, op, request_id, 0);
    put_cstr(w, user);
    put_cstr(w, ns);
    put_cstr(w, pattern);
    if (op == PROTO_OP_ACL_SET) {
        tern_wbuf_u32(w, perms);
    }
    return proto_frame_end(w, start);
}

int proto_encode_acl_list(struct tern_wbuf *w,
                          uint64_t request_id,
                          const char *user)
{
    size_t start = w->len;
    if (user != NULL && user[0] != '\0' && !name_ok(user, PROTO_MAX_USER)) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, PROTO_OP_ACL_LIST, request_id, 0);
    put_cstr(w, user);
    return proto_frame_end(w, start);
}

int proto_encode_list_page_req(struct tern_wbuf *w,
                               uint8_t op,
                               uint64_t request_id,
                               const char *user,
                               const struct proto_list_cursor *after,
                               uint32_t max_count)
{
    static const struct proto_list_cursor start_cursor = {NULL, NULL, NULL};
    const struct proto_list_cursor *a = after != NULL ? after : &start_cursor;
    size_t start = w->len;
    int from_start = a->name == NULL || a->name[0] == '\0';
    int user_given = user != NULL && user[0] != '\0';
    int ok;
    switch (op) {
    case PROTO_OP_USER_LIST:
        ok = !user_given && (from_start || name_ok(a->name, PROTO_MAX_USER));
        break;
    case PROTO_OP_NAMESPACE_LIST:
        ok = !user_given &&
             (from_start || name_ok(a->name, PROTO_MAX_NAMESPACE));
        break;
    case PROTO_OP_ACL_LIST:
        ok = (!user_given || name_ok(user, PROTO_MAX_USER));
        if (from_start) {
            ok = ok && (a->ns == NULL || a->ns[0] == '\0') &&
                 (a->pattern == NULL || a->pattern[0] == '\0');
        } else {
            ok = ok && name_ok(a->name, PROTO_MAX_USER) &&
                 name_ok(a->ns, PROTO_MAX_NAMESPACE) && a->pattern != NULL &&
                 proto_pattern_valid(a->pattern, strlen(a->pattern));
        }
        break;
    default:
        return TERN_EINVAL;
    }
    if (!ok) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, op, request_id, 0);
    if (op == PROTO_OP_ACL_LIST) {
        put_cstr(w, user);
    }
    put_cstr(w, from_start ? NULL : a->name);
    if (op == PROTO_OP_ACL_LIST) {
        put_cstr(w, from_start ? NULL : a->ns);
        put_cstr(w, from_start ? NULL : a->pattern);
    }
    tern_wbuf_u32(w, max_count);
    return proto_frame_end(w, start);
}

int proto_encode_namespace_set(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *ns,
                               uint64_t max_queues,
                               uint64_t max_bytes,
                               uint64_t produce_bytes_per_s)
{
    size_t start = w->len;
    if (!name_ok(ns, PROTO_MAX_NAMESPACE)) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, PROTO_OP_NAMESPACE_SET, request_id, 0);
    put_cstr(w, ns);
    tern_wbuf_u64(w, max_queues);
    tern_wbuf_u64(w, max_bytes);
    tern_wbuf_u64(w, produce_bytes_per_s);
    return proto_frame_end(w, start);
}

size_t proto_list_begin(struct tern_wbuf *w, uint8_t op, uint64_t request_id)
{
    size_t start = w->len;
    proto_frame_begin(w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, 0);
    tern_wbuf_u32(w, 0);
    return start;
}

void proto_put_user_entry(struct tern_wbuf *w,
                          const char *user,
                          uint32_t flags,
                          int has_cred)
{
    put_cstr(w, user);
    tern_wbuf_u32(w, flags);
    tern_wbuf_u8(w, has_cred != 0 ? 1 : 0);
}

void proto_put_acl_entry(struct tern_wbuf *w,
                         const char *user,
                         const char *ns,
                         const char *pattern,
                         uint32_t perms)
{
    put_cstr(w, user);
    put_cstr(w, ns);
    put_cstr(w, pattern);
    tern_wbuf_u32(w, perms);
}

void proto_put_namespace_entry(struct tern_wbuf *w,
                               const char *ns,
                               uint64_t max_queues,
                               uint64_t max_bytes,
                               uint64_t produce_bytes_per_s)
{
    put_cstr(w, ns);
    tern_wbuf_u64(w, max_queues);
    tern_wbuf_u64(w, max_bytes);
    tern_wbuf_u64(w, produce_bytes_per_s);
}

int proto_list_end(struct tern_wbuf *w, size_t start, uint32_t n)
{
    if (w->err == 0) {
        if (w->len < start + PROTO_HEADER_SIZE + 4) {
            return TERN_EINVAL;
        }
        tern_put_u32(w->base + start + PROTO_HEADER_SIZE, n);
    }
    return proto_frame_end(w, start);
}

int proto_list_end_page(struct tern_wbuf *w, size_t start, uint32_t n, int more)
{
    tern_wbuf_u8(w, more != 0 ? 1 : 0);
    return proto_list_end(w, start, n);
}

static size_t str_size(const char *s)
{
    return 2 + (s != NULL ? strlen(s) : 0);
}

size_t proto_list_user_size(const char *user)
{
    return str_size(user) + 4 + 1;
}

size_t proto_list_acl_size(const char *user,
                           const char *ns,
                           const char *pattern)
{
    return str_size(user) + str_size(ns) + str_size(pattern) + 4;
}

size_t proto_list_namespace_size(const char *ns)
{
    return str_size(ns) + sizeof(uint64_t) * 3;
}

/* Record readers: a record that does not decode or names something
 * invalid sets c->err. */
static void get_user_entry(struct tern_cursor *c, void *item)
{
    struct proto_user_entry *e = item;
    int rv = get_bounded(c, &e->user, &e->user_len, PROTO_MAX_USER);
    e->flags = tern_cursor_u32(c);
    e->has_cred = tern_cursor_u8(c);
    if (rv != 0 || e->has_cred > 1) {
        c->err = TERN_EMALFORMED;
    }
}

static void get_acl_entry(struct tern_cursor *c, void *item)
{
    struct proto_acl_entry *e = item;
    int rv = get_bounded(c, &e->user, &e->user_len, PROTO_MAX_USER);
    if (rv == 0) {
        rv = get_bounded(c, &e->ns, &e->ns_len, PROTO_MAX_NAMESPACE);
    }
    if (rv == 0) {
        rv = get_pattern(c, &e->pattern, &e->pattern_len);
    }
    e->perms = tern_cursor_u32(c);
    if (rv != 0) {
        c->err = TERN_EMALFORMED;
    }
}

static void get_namespace_entry(struct tern_cursor *c, void *item)
{
    struct proto_namespace_entry *e = item;
    int rv = get_bounded(c, &e->ns, &e->ns_len, PROTO_MAX_NAMESPACE);
    e->max_queues = tern_cursor_u64(c);
    e->max_bytes = tern_cursor_u64(c);
    e->produce_bytes_per_s = tern_cursor_u64(c);
    if (rv != 0) {
        c->err = TERN_EMALFORMED;
    }
}

int proto_decode_list_resp(uint8_t op,
                           const void *body,
                           size_t len,
                           struct proto_list_resp *out)
{
    struct tern_cursor c;
    union
    {
        struct proto_user_entry u;
        struct proto_acl_entry a;
        struct proto_namespace_entry n;
    } scratch;
    record_get_cb get;
    memset(out, 0, sizeof *out);
    switch (op) {
    case PROTO_OP_USER_LIST:
        get = get_user_entry;
        break;
    case PROTO_OP_ACL_LIST:
        get = get_acl_entry;
        break;
    case PROTO_OP_NAMESPACE_LIST:
        get = get_namespace_entry;
        break;
    default:
        return TERN_EINVAL;
    }
    tern_cursor_init(&c, body, len);
    out->op = op;
    out->n = tern_cursor_u32(&c);
    records_skip(&c, out->n, get, &scratch, &out->entries, &out->entries_len);
    int ok = get_more_tail(&c, &out->paged, &out->more);
    return decode_end(&c, ok, out, sizeof *out);
}

int proto_next_user(const struct proto_list_resp *r,
                    size_t *pos,
                    struct proto_user_entry *e)
{
    if (r->op != PROTO_OP_USER_LIST) {
        return 0;
    }
    return records_next(r->entries, r->entries_len, pos, get_user_entry, e);
}

int proto_next_acl(const struct proto_list_resp *r,
                   size_t *pos,
                   struct proto_acl_entry *e)
{
    if (r->op != PROTO_OP_ACL_LIST) {
        return 0;
    }
    return records_next(r->entries, r->entries_len, pos, get_acl_entry, e);
}

int proto_next_namespace(const struct proto_list_resp *r,
                         size_t *pos,
                         struct proto_namespace_entry *e)
{
    if (r->op != PROTO_OP_NAMESPACE_LIST) {
        return 0;
    }
    return records_next(r->entries, r->entries_len, pos, get_namespace_entry,
                        e);
}

int proto_encode_auth_start(struct tern_wbuf *w,
                            uint64_t request_id,
                            const char *mechanism,
                            const char *ns,
                            const void *data,
                            uint32_t len)
{
    size_t start = w->len;
    if (mechanism == NULL ||
        !mechanism_ok(mechanism, strnlen(mechanism, PROTO_MAX_MECHANISM + 1)) ||
        len > PROTO_MAX_AUTH_DATA || (len > 0 && data == NULL)) {
        return TERN_EINVAL;
    }
    if (ns == NULL) {
        ns = "";
    }
    if (ns[0] != '\0' && !name_ok(ns, PROTO_MAX_NAMESPACE)) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, PROTO_OP_AUTH_START, request_id, 0);
    put_cstr(w, mechanism);
    put_cstr(w, ns);
    proto_put_blob(w, data, len);
    return proto_frame_end(w, start);
}

int proto_encode_auth_continue(struct tern_wbuf *w,
                               uint64_t request_id,
                               const void *data,
                               uint32_t len)
{
    size_t start = w->len;
    if (len > PROTO_MAX_AUTH_DATA || (len > 0 && data == NULL)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_AUTH_CONTINUE, request_id, 0);
    proto_put_blob(w, data, len);
    return proto_frame_end(w, start);
}

int proto_encode_auth_resp(struct tern_wbuf *w,
                           uint8_t op,
                           uint64_t request_id,
                           const void *data,
                           uint32_t len)
{
    size_t start = w->len;
    if ((op != PROTO_OP_AUTH_START && op != PROTO_OP_AUTH_CONTINUE) ||
        len > PROTO_MAX_AUTH_DATA || (len > 0 && data == NULL)) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, 0);
    proto_put_blob(w, data, len);
    return proto_frame_end(w, start);
}

int proto_decode_auth_resp(const void *body,
                           size_t len,
                           const void **data,
                           uint32_t *data_len)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *data = proto_get_blob(&c, data_len);
    if (cursor_finish(&c) != 0 || *data_len > PROTO_MAX_AUTH_DATA) {
        *data = NULL;
        *data_len = 0;
        return TERN_EMALFORMED;
    }
    return 0;
}

int proto_encode_producer_init_resp(struct tern_wbuf *w,
                                    uint64_t request_id,
                                    uint64_t producer_id)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_PRODUCER_INIT | PROTO_OP_RESPONSE, request_id,
                      0);
    tern_wbuf_u64(w, producer_id);
    return proto_frame_end(w, start);
}

int proto_decode_producer_init_resp(const void *body,
                                    size_t len,
                                    uint64_t *producer_id)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *producer_id = tern_cursor_u64(&c);
    if (cursor_finish(&c) != 0 || *producer_id == 0) {
        *producer_id = 0;
        return TERN_EMALFORMED;
    }
    return 0;
}

/* ---- MESSAGE_TRACE ---- */

int proto_encode_message_trace(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               uint64_t offset)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_MESSAGE_TRACE, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u64(w, offset);
    return proto_frame_end(w, start);
}

/* The answer's fixed fields (queue_id .. term) take 68 bytes; the key
 * blob's length follows them. */
#define PROTO__TRACE_FIXED 68

size_t proto_trace_begin(struct tern_wbuf *w,
                         uint64_t request_id,
                         const struct proto_trace *t)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_MESSAGE_TRACE | PROTO_OP_RESPONSE, request_id,
                      0);
    if (t->key_len > PROTO_MAX_KEY || t->tag_len > PROTO_MAX_TAG ||
        (t->key_len > 0 && t->key == NULL) ||
        (t->tag_len > 0 && t->tag == NULL)) {
        if (w->err == 0) {
            w->err = TERN_EINVAL;
        }
        return start;
    }
    tern_wbuf_u64(w, t->queue_id);
    tern_wbuf_u64(w, t->offset);
    tern_wbuf_u64(w, t->append_ms);
    tern_wbuf_u64(w, t->producer_id);
    tern_wbuf_u64(w, t->seq);
    tern_wbuf_u32(w, t->batch_pos);
    tern_wbuf_u32(w, t->batch_count);
    tern_wbuf_u32(w, t->len);
    tern_wbuf_u64(w, t->raft_index);
    tern_wbuf_u64(w, t->term);
    proto_put_blob(w, t->key, t->key_len);
    proto_put_str(w, t->tag, t->tag_len);
    tern_wbuf_u32(w, 0); /* group count, patched by proto_trace_end */
    return start;
}

void proto_put_trace_group(struct tern_wbuf *w,
                           const struct proto_trace_group *g)
{
    proto_put_str(w, g->name, g->name_len);
    tern_wbuf_u64(w, g->next_offset);
    tern_wbuf_u64(w, g->commit_ms);
    tern_wbuf_u64(w, g->commit_index);
}

size_t proto_trace_group_size(size_t name_len)
{
    return 2 + name_len + 24;
}

/* Patch the group count n of a trace answer begun at start, then seal. */
static int trace_seal(struct tern_wbuf *w, size_t start, uint32_t n)
{
    if (w->err == 0) {
        /* The count follows the key blob and the tag str. */
        uint8_t *b = w->base + start + PROTO_HEADER_SIZE + PROTO__TRACE_FIXED;
        if (w->len < start + PROTO_HEADER_SIZE + PROTO__TRACE_FIXED + 11) {
            return TERN_EINVAL; /* not begun by proto_trace_begin */
        }
        uint32_t key_len = tern_get_u32(b);
        uint16_t tag_len = tern_get_u16(b + 4 + key_len);
        tern_put_u32(b + 6 + key_len + tag_len, n);
    }
    return proto_frame_end(w, start);
}

int proto_trace_end(struct tern_wbuf *w, size_t start, uint32_t n, int more)
{
    tern_wbuf_u8(w, more != 0 ? 1 : 0);
    return trace_seal(w, start, n);
}

int proto_trace_end_deliveries(struct tern_wbuf *w,
                               size_t start,
                               uint32_t n,
                               int more,
                               const struct proto_delivery *d,
                               uint32_t nd,
                               int dmore)
{
    tern_wbuf_u8(w, more != 0 ? 1 : 0);
    tern_wbuf_u8(w, 1); /* tail version */
    tern_wbuf_u32(w, nd);
    for (uint32_t i = 0; i < nd; i++) {
        if (d[i].state > PROTO_DELIVERY_READY ||
            !tern_name_valid(d[i].group, d[i].group_len)) {
            if (w->err == 0) {
                w->err = TERN_EINVAL;
            }
            break;
        }
        proto_put_str(w, d[i].group, d[i].group_len);
        tern_wbuf_u8(w, d[i].state);
        tern_wbuf_u32(w, d[i].count);
        tern_wbuf_u64(w, d[i].consumer_id);
        tern_wbuf_u64(w, d[i].deadline_ms);
    }
    tern_wbuf_u8(w, dmore != 0 ? 1 : 0);
    return trace_seal(w, start, n);
}

size_t proto_delivery_size(size_t name_len)
{
    return 2 + name_len + 1 + 4 + 8 + 8;
}

int proto_encode_message_trace_flags(struct tern_wbuf *w,
                                     uint64_t request_id,
                                     const char *queue,
                                     uint64_t offset,
                                     uint8_t flags)
{
    size_t start = w->len;
    if ((flags & ~PROTO_TRACE_DELIVERIES) != 0) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_MESSAGE_TRACE, request_id, 0);
    put_name(w, queue);
    tern_wbuf_u64(w, offset);
    if (flags != 0) {
        tern_wbuf_u8(w, flags);
    }
    return proto_frame_end(w, start);
}

int proto_encode_status_req(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t flags)
{
    size_t start = w->len;
    if ((flags & ~PROTO_STATUS_TIMERS) != 0) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_STATUS, request_id, 0);
    if (flags != 0) {
        tern_wbuf_u8(w, flags);
    }
    return proto_frame_end(w, start);
}

static void get_trace_group(struct tern_cursor *c, void *item)
{
    struct proto_trace_group *g = item;
    g->name = proto_get_str(c, &g->name_len);
    g->next_offset = tern_cursor_u64(c);
    g->commit_ms = tern_cursor_u64(c);
    g->commit_index = tern_cursor_u64(c);
    if (c->err == 0 && !tern_name_valid(g->name, g->name_len)) {
        c->err = TERN_EMALFORMED;
    }
}

static void get_delivery(struct tern_cursor *c, void *item)
{
    struct proto_delivery *d = item;
    d->group = proto_get_str(c, &d->group_len);
    d->state = tern_cursor_u8(c);
    d->count = tern_cursor_u32(c);
    d->consumer_id = tern_cursor_u64(c);
    d->deadline_ms = tern_cursor_u64(c);
    if (c->err == 0 && (!tern_name_valid(d->group, d->group_len) ||
                        d->state > PROTO_DELIVERY_READY)) {
        c->err = TERN_EMALFORMED;
    }
}

/* The delivery tail of a MESSAGE_TRACE answer, when bytes are left: 1 when
 * absent or well formed (a later version's extra bytes skipped), else 0. */
static int get_delivery_tail(struct tern_cursor *c, struct proto_trace *out)
{
    struct proto_delivery d;
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 1;
    }
    uint8_t version = tern_cursor_u8(c);
    out->has_deliveries = 1;
    out->n_deliveries = tern_cursor_u32(c);
    records_skip(c, out->n_deliveries, get_delivery, &d, &out->deliveries,
                 &out->deliveries_len);
    out->deliveries_more = tern_cursor_u8(c);
    if (c->err == 0 && version > 1) {
        (void)tern_cursor_bytes(c, tern_cursor_left(c));
    }
    return version >= 1 && out->deliveries_more <= 1;
}

int proto_next_delivery(const struct proto_trace *t,
                        size_t *pos,
                        struct proto_delivery *d)
{
    return records_next(t->deliveries, t->deliveries_len, pos, get_delivery, d);
}

int proto_decode_message_trace_resp(const void *body,
                                    size_t len,
                                    struct proto_trace *out)
{
    struct tern_cursor c;
    struct proto_trace_group g;
    memset(out, 0, sizeof *out);
    if (body == NULL) {
        return TERN_EMALFORMED; /* the answer is never empty */
    }
    tern_cursor_init(&c, body, len);
    out->queue_id = tern_cursor_u64(&c);
    out->offset = tern_cursor_u64(&c);
    out->append_ms = tern_cursor_u64(&c);
    out->producer_id = tern_cursor_u64(&c);
    out->seq = tern_cursor_u64(&c);
    out->batch_pos = tern_cursor_u32(&c);
    out->batch_count = tern_cursor_u32(&c);
    out->len = tern_cursor_u32(&c);
    out->raft_index = tern_cursor_u64(&c);
    out->term = tern_cursor_u64(&c);
    out->key = proto_get_blob(&c, &out->key_len);
    out->tag = proto_get_str(&c, &out->tag_len);
    out->n_groups = tern_cursor_u32(&c);
    records_skip(&c, out->n_groups, get_trace_group, &g, &out->groups,
                 &out->groups_len);
    const uint8_t *more = tern_cursor_bytes(&c, 1);
    out->more = more != NULL ? more[0] : 0;
    int tail_ok = more != NULL ? get_delivery_tail(&c, out) : 1;
    int ok =
        tail_ok && out->key_len <= PROTO_MAX_KEY &&
        out->tag_len <= PROTO_MAX_TAG &&
        (out->tag_len == 0 || proto_tag_valid(out->tag, out->tag_len) != 0) &&
        out->batch_pos < TERN_MAX(out->batch_count, 1u) && out->more <= 1;
    if (out->key_len == 0) {
        out->key = NULL;
    }
    if (out->tag_len == 0) {
        out->tag = NULL;
    }
    return decode_end(&c, ok, out, sizeof *out);
}

int proto_next_trace_group(const struct proto_trace *t,
                           size_t *pos,
                           struct proto_trace_group *g)
{
    return records_next(t->groups, t->groups_len, pos, get_trace_group, g);
}

/* ---- Shared group answers ---- */

size_t proto_receive_begin(struct tern_wbuf *w,
                           uint64_t request_id,
                           uint64_t queue_id)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_RECEIVE | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u64(w, queue_id);
    tern_wbuf_u32(w, 0); /* n, patched by proto_receive_end */
    return start;
}

void proto_put_received(struct tern_wbuf *w,
                        const struct proto_fetched_msg *m,
                        uint32_t count)
{
    put_fetched(w, m, true);
    tern_wbuf_u32(w, count);
}

int proto_receive_end(struct tern_wbuf *w, size_t start, uint32_t n)
{
    if (w->err == 0) {
        if (w->len < start + PROTO_HEADER_SIZE + 12) {
            return TERN_EINVAL; /* not begun by proto_receive_begin */
        }
        tern_put_u32(w->base + start + PROTO_HEADER_SIZE + 8, n);
    }
    return proto_frame_end(w, start);
}

static void get_received(struct tern_cursor *c, void *item)
{
    struct received *x = item;
    get_fetched_props(c, &x->m);
    x->count = tern_cursor_u32(c);
}

int proto_next_received(const struct proto_fetch_resp *r,
                        size_t *pos,
                        struct proto_fetched_msg *m,
                        uint32_t *count)
{
    struct received x;
    if (!r->with_counts ||
        !records_next(r->msgs, r->msgs_len, pos, get_received, &x)) {
        return 0;
    }
    *m = x.m;
    *count = x.count;
    return 1;
}

int proto_decode_receive_resp(const void *body,
                              size_t len,
                              struct proto_fetch_resp *out)
{
    struct tern_cursor c;
    struct received m;
    tern_cursor_init(&c, body, len);
    memset(out, 0, sizeof *out);
    out->queue_id = tern_cursor_u64(&c);
    out->n = tern_cursor_u32(&c);
    out->with_props = 1;
    out->with_counts = 1;
    if (c.err == 0 && out->n > PROTO_SHARED_LIST_MAX) {
        return decode_end(&c, 0, out, sizeof *out);
    }
    records_skip(&c, out->n, get_received, &m, &out->msgs, &out->msgs_len);
    return decode_end(&c, 1, out, sizeof *out);
}

int proto_encode_settle_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const uint8_t *done,
                             uint32_t n)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_SETTLE | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        tern_wbuf_u8(w, done[i] != 0 ? 1 : 0);
    }
    return proto_frame_end(w, start);
}

int proto_decode_settle_resp(const void *body,
                             size_t len,
                             const uint8_t **done,
                             uint32_t *n)
{
    struct tern_cursor c;
    int ok = 1;
    tern_cursor_init(&c, body, len);
    *n = tern_cursor_u32(&c);
    *done = tern_cursor_bytes(&c, *n);
    for (uint32_t i = 0; c.err == 0 && i < *n; i++) {
        ok = ok && (*done)[i] <= 1;
    }
    if (cursor_finish(&c) != 0 || !ok || *n > PROTO_SHARED_LIST_MAX) {
        *n = 0;
        *done = NULL;
        return TERN_EMALFORMED;
    }
    return 0;
}

/* ---- GROUP_STATUS (op 32) ---- */

int proto_encode_group_status(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const char *group,
                              const char *after,
                              uint32_t max_count)
{
    size_t start = w->len;
    size_t gn = group != NULL ? strlen(group) : 0;
    size_t an = after != NULL ? strlen(after) : 0;
    if ((gn > 0 && !tern_name_valid(group, gn)) ||
        (an > 0 && !tern_name_valid(after, an))) {
        return TERN_EBADNAME;
    }
    proto_frame_begin(w, PROTO_OP_GROUP_STATUS, request_id, 0);
    put_name(w, queue);
    proto_put_str(w, gn > 0 ? group : "", gn);
    proto_put_str(w, an > 0 ? after : "", an);
    tern_wbuf_u32(w, max_count);
    return proto_frame_end(w, start);
}

size_t proto_group_status_begin(struct tern_wbuf *w, uint64_t request_id)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_GROUP_STATUS | PROTO_OP_RESPONSE, request_id,
                      0);
    tern_wbuf_u32(w, 0); /* n, patched by proto_group_status_end */
    return start;
}

/* Version 1 record bytes after the blob length, without the strings and
 * the consumers. */
#define PROTO__GSTATUS_FIXED (1 + 2 + 1 + 7 * 8 + 4 + 4 + 2 + 4 * 8 + 1 + 8 + 2)

size_t proto_group_status_size(const struct proto_group_status *g)
{
    return 4 + PROTO__GSTATUS_FIXED + g->group_len + g->dlq_len +
           12 * (size_t)g->n_consumers + 16;
}

void proto_put_group_status(struct tern_wbuf *w,
                            const struct proto_group_status *g)
{
    if (g->n_consumers > PROTO_STATUS_CONSUMERS_MAX ||
        (g->n_consumers > 0 && g->consumers == NULL) ||
        !tern_name_valid(g->group, g->group_len)) {
        if (w->err == 0) {
            w->err = TERN_EINVAL;
        }
        return;
    }
    tern_wbuf_u32(w, (uint32_t)(proto_group_status_size(g) - 4));
    tern_wbuf_u8(w, PROTO_GROUP_STATUS_VERSION);
    proto_put_str(w, g->group, g->group_len);
    tern_wbuf_u8(w, g->shared ? 1 : 0);
    tern_wbuf_u64(w, g->start);
    tern_wbuf_u64(w, g->end);
    tern_wbuf_u64(w, g->committed);
    tern_wbuf_u64(w, g->next);
    tern_wbuf_u64(w, g->lag);
    tern_wbuf_u64(w, g->commit_ms);
    tern_wbuf_u64(w, g->ack_timeout_ms);
    tern_wbuf_u32(w, g->max_deliveries);
    tern_wbuf_u32(w, g->window);
    proto_put_str(w, g->dlq != NULL ? g->dlq : "", g->dlq_len);
    tern_wbuf_u64(w, g->dlq_depth);
    tern_wbuf_u64(w, g->in_flight);
    tern_wbuf_u64(w, g->ready);
    tern_wbuf_u64(w, g->oldest_deadline_ms);
    tern_wbuf_u8(w, g->partial ? 1 : 0);
    tern_wbuf_u64(w, g->others_held);
    tern_wbuf_u16(w, g->n_consumers);
    for (uint16_t i = 0; i < g->n_consumers; i++) {
        tern_wbuf_u64(w, g->consumers[i].id);
        tern_wbuf_u32(w, g->consumers[i].held);
    }
    tern_wbuf_u64(w, g->claim_holder); /* version 2 */
    tern_wbuf_u64(w, g->claim_until_ms);
}

int proto_group_status_end(struct tern_wbuf *w,
                           size_t start,
                           uint32_t n,
                           int more)
{
    tern_wbuf_u8(w, more != 0 ? 1 : 0);
    if (w->err == 0) {
        if (w->len < start + PROTO_HEADER_SIZE + 5) {
            return TERN_EINVAL; /* not begun by proto_group_status_begin */
        }
        tern_put_u32(w->base + start + PROTO_HEADER_SIZE, n);
    }
    return proto_frame_end(w, start);
}

/* A byte at c, 0 past the end (c->err set then). */
static uint8_t get_u8(struct tern_cursor *c)
{
    const uint8_t *x = tern_cursor_bytes(c, 1);
    return x != NULL ? x[0] : 0;
}

/* One record (a blob) into *g, read in place; a bad one sets c->err. */
static void get_group_status(struct tern_cursor *c, void *item)
{
    struct proto_group_status *g = item;
    memset(g, 0, sizeof *g);
    uint32_t len = tern_cursor_u32(c);
    if (c->err != 0 || len == 0 || !tern_cursor_need(c, len)) {
        c->err = TERN_EMALFORMED; /* a record has at least its version */
        return;
    }
    const uint8_t *start = c->p;
    g->version = get_u8(c);
    g->group = proto_get_str(c, &g->group_len);
    g->shared = get_u8(c);
    g->start = tern_cursor_u64(c);
    g->end = tern_cursor_u64(c);
    g->committed = tern_cursor_u64(c);
    g->next = tern_cursor_u64(c);
    g->lag = tern_cursor_u64(c);
    g->commit_ms = tern_cursor_u64(c);
    g->ack_timeout_ms = tern_cursor_u64(c);
    g->max_deliveries = tern_cursor_u32(c);
    g->window = tern_cursor_u32(c);
    g->dlq = proto_get_str(c, &g->dlq_len);
    g->dlq_depth = tern_cursor_u64(c);
    g->in_flight = tern_cursor_u64(c);
    g->ready = tern_cursor_u64(c);
    g->oldest_deadline_ms = tern_cursor_u64(c);
    g->partial = get_u8(c);
    g->others_held = tern_cursor_u64(c);
    g->n_consumers = tern_cursor_u16(c);
    if (c->err == 0 && g->n_consumers <= PROTO_STATUS_CONSUMERS_MAX) {
        g->consumers_raw = tern_cursor_bytes(c, (size_t)12 * g->n_consumers);
    }
    if (g->version >= 2) {
        g->claim_holder = tern_cursor_u64(c);
        g->claim_until_ms = tern_cursor_u64(c);
    }
    size_t used = (size_t)(c->p - start);
    /* Versions 1 and 2 end there; later ones may not: the rest of the
     * blob is skipped. */
    if (c->err != 0 || used > len || g->version < 1 || g->shared > 1 ||
        g->partial > 1 || g->n_consumers > PROTO_STATUS_CONSUMERS_MAX ||
        !tern_name_valid(g->group, g->group_len) ||
        (g->dlq_len > 0 && !tern_qname_valid(g->dlq, g->dlq_len)) ||
        (g->version <= 2 && used != len)) {
        c->err = TERN_EMALFORMED;
        return;
    }
    (void)tern_cursor_bytes(c, len - used);
}

int proto_decode_group_status_resp(const void *body,
                                   size_t len,
                                   struct proto_group_status_resp *out)
{
    struct tern_cursor c;
    struct proto_group_status g;
    memset(out, 0, sizeof *out);
    if (body == NULL) {
        return TERN_EMALFORMED; /* the answer is never empty */
    }
    tern_cursor_init(&c, body, len);
    out->n = tern_cursor_u32(&c);
    records_skip(&c, out->n, get_group_status, &g, &out->records,
                 &out->records_len);
    const uint8_t *more = tern_cursor_bytes(&c, 1);
    out->more = more != NULL ? more[0] : 0;
    return decode_end(&c, out->more <= 1, out, sizeof *out);
}

int proto_next_group_status(const struct proto_group_status_resp *r,
                            size_t *pos,
                            struct proto_group_status *g)
{
    return records_next(r->records, r->records_len, pos, get_group_status, g);
}

void proto_status_consumer(const struct proto_group_status *g,
                           uint32_t i,
                           struct proto_status_consumer *c)
{
    memset(c, 0, sizeof *c);
    if (g->consumers_raw != NULL && i < g->n_consumers) {
        c->id = tern_get_u64(g->consumers_raw + (size_t)12 * i);
        c->held = tern_get_u32(g->consumers_raw + (size_t)12 * i + 8);
    }
}

/* ---- Leadership transfer (op 33) ---- */

int proto_encode_cluster_transfer(struct tern_wbuf *w,
                                  uint64_t request_id,
                                  uint64_t to_id)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_CLUSTER_TRANSFER, request_id, 0);
    tern_wbuf_u64(w, to_id);
    return proto_frame_end(w, start);
}

int proto_encode_cluster_transfer_resp(struct tern_wbuf *w,
                                       uint64_t request_id,
                                       uint64_t leader_id,
                                       uint64_t term)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_CLUSTER_TRANSFER | PROTO_OP_RESPONSE,
                      request_id, 0);
    tern_wbuf_u64(w, leader_id);
    tern_wbuf_u64(w, term);
    return proto_frame_end(w, start);
}

int proto_decode_cluster_transfer_resp(const void *body,
                                       size_t len,
                                       uint64_t *leader_id,
                                       uint64_t *term)
{
    struct tern_cursor c;
    int rv;
    tern_cursor_init(&c, body, len);
    *leader_id = tern_cursor_u64(&c);
    *term = tern_cursor_u64(&c);
    rv = cursor_finish(&c);
    if (rv == 0 && *leader_id == 0) {
        rv = TERN_EMALFORMED;
    }
    return rv;
}

/* ---- BACKUP (op 36) ---- */

int proto_encode_backup(struct tern_wbuf *w,
                        uint64_t request_id,
                        uint8_t flags,
                        const char *dir,
                        uint64_t min_applied)
{
    size_t start = w->len;
    size_t n = dir != NULL ? strlen(dir) : 0;
    if ((flags & ~PROTO_BACKUP_VERIFY) != 0 || n == 0 ||
        n > PROTO_BACKUP_PATH_MAX) {
        return TERN_EINVAL;
    }
    proto_frame_begin(w, PROTO_OP_BACKUP, request_id, 0);
    tern_wbuf_u8(w, flags);
    proto_put_str(w, dir, n);
    tern_wbuf_u64(w, min_applied);
    return proto_frame_end(w, start);
}

int proto_encode_backup_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const struct proto_backup_info *b)
{
    size_t start = w->len;
    proto_frame_begin(w, PROTO_OP_BACKUP | PROTO_OP_RESPONSE, request_id, 0);
    tern_wbuf_u8(w, PROTO_BACKUP_VERSION);
    proto_put_str(w, b->cluster, b->cluster_len);
    tern_wbuf_u64(w, b->node_id);
    tern_wbuf_u64(w, b->term);
    tern_wbuf_u64(w, b->last_applied);
    tern_wbuf_u64(w, b->log_start);
    tern_wbuf_u64(w, b->log_end);
    tern_wbuf_u32(w, b->n_files);
    tern_wbuf_u64(w, b->total_bytes);
    tern_wbuf_u64(w, b->created_ms);
    return proto_frame_end(w, start);
}

int proto_decode_backup_resp(const void *body,
                             size_t len,
                             struct proto_backup_info *out)
{
    struct tern_cursor c;
    uint8_t version;
    memset(out, 0, sizeof *out);
    tern_cursor_init(&c, body, len);
    version = tern_cursor_u8(&c);
    if (c.err == 0 && version == 0) {
        return TERN_EMALFORMED;
    }
    out->cluster = proto_get_str(&c, &out->cluster_len);
    out->node_id = tern_cursor_u64(&c);
    out->term = tern_cursor_u64(&c);
    out->last_applied = tern_cursor_u64(&c);
    out->log_start = tern_cursor_u64(&c);
    out->log_end = tern_cursor_u64(&c);
    out->n_files = tern_cursor_u32(&c);
    out->total_bytes = tern_cursor_u64(&c);
    out->created_ms = tern_cursor_u64(&c);
    if (c.err != 0) {
        memset(out, 0, sizeof *out);
        return TERN_EMALFORMED;
    }
    /* A later version appends fields: the rest is skipped. */
    return 0;
}

/* ---- HELLO ---- */

static int encode_u32_frame(struct tern_wbuf *w,
                            uint8_t op,
                            uint64_t request_id,
                            uint32_t v)
{
    size_t start = w->len;
    proto_frame_begin(w, op, request_id, 0);
    tern_wbuf_u32(w, v);
    return proto_frame_end(w, start);
}

int proto_encode_hello(struct tern_wbuf *w,
                       uint64_t request_id,
                       uint32_t features)
{
    return encode_u32_frame(w, PROTO_OP_HELLO, request_id, features);
}

int proto_encode_hello_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint32_t features)
{
    return encode_u32_frame(w, PROTO_OP_HELLO | PROTO_OP_RESPONSE, request_id,
                            features);
}

int proto_decode_hello_resp(const void *body, size_t len, uint32_t *out)
{
    struct tern_cursor c;
    tern_cursor_init(&c, body, len);
    *out = tern_cursor_u32(&c);
    return decode_end(&c, 1, out, sizeof *out);
}
