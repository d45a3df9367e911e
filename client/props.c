/*
 * libtern message properties: the properties block a produce carries per
 * message (format: index/cmd.c, "Properties block"; the wire carries the
 * same bytes, proto/include/proto.h), checked against the limits of
 * docs/MESSAGES.md before anything is sent; its decoder for fetched
 * messages (bytes from the server, read through a bounded tern_cursor);
 * and the tag filter expression "tagA || tagB".
 */
#include <string.h>

#include "client_int.h"

#define PROPS__VERSION  1
#define PROPS__HDR_SIZE 14

static int tag_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

static int tag_ok(const char *t, size_t len)
{
    if (len == 0 || len > TERN_TAG_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (!tag_char(t[i])) {
            return 0;
        }
    }
    return 1;
}

int tern__props_has(const struct tern_message *m)
{
    return m->key_len > 0 || (m->tag != NULL && m->tag[0] != '\0') ||
           m->n_headers > 0;
}

int tern__props_encode(const struct tern_message *m,
                       size_t i,
                       uint64_t now_ms,
                       struct tern_wbuf *w,
                       char *errmsg)
{
    size_t tag_len = m->tag != NULL ? strlen(m->tag) : 0;
    size_t hbytes = 0;
    if (m->key_len > TERN_KEY_MAX || (m->key_len > 0 && m->key == NULL)) {
        tern_errmsg_printf(errmsg,
                           "message %zu: key of %zu bytes: a key is 1..%d "
                           "bytes",
                           i, m->key_len, TERN_KEY_MAX);
        return m->key == NULL ? TERN_EINVAL : TERN_ETOOBIG;
    }
    if (tag_len > 0 && !tag_ok(m->tag, tag_len)) {
        tern_errmsg_printf(errmsg,
                           "message %zu: tag \"%.80s\": a tag is 1..%d bytes "
                           "of [A-Za-z0-9._-]",
                           i, m->tag, TERN_TAG_MAX);
        return tag_len > TERN_TAG_MAX ? TERN_ETOOBIG : TERN_EINVAL;
    }
    if (m->n_headers > TERN_HEADERS_MAX ||
        (m->n_headers > 0 && m->headers == NULL)) {
        tern_errmsg_printf(errmsg,
                           "message %zu: %zu headers are over the limit of "
                           "%d",
                           i, m->n_headers, TERN_HEADERS_MAX);
        return m->headers == NULL ? TERN_EINVAL : TERN_ETOOBIG;
    }
    for (size_t h = 0; h < m->n_headers; h++) {
        const struct tern_header *x = &m->headers[h];
        size_t nl = x->name != NULL ? strlen(x->name) : 0;
        if (nl == 0 || nl > TERN_HEADER_NAME_MAX) {
            tern_errmsg_printf(errmsg,
                               "message %zu: header %zu: a name is 1..%d "
                               "bytes",
                               i, h, TERN_HEADER_NAME_MAX);
            return nl == 0 ? TERN_EINVAL : TERN_ETOOBIG;
        }
        if (x->value_len > TERN_HEADER_VALUE_MAX ||
            (x->value_len > 0 && x->value == NULL)) {
            tern_errmsg_printf(errmsg,
                               "message %zu: header %s: a value is 0..%d "
                               "bytes",
                               i, x->name, TERN_HEADER_VALUE_MAX);
            return x->value == NULL ? TERN_EINVAL : TERN_ETOOBIG;
        }
        hbytes += nl + x->value_len;
    }
    if (hbytes > TERN_HEADERS_BYTES_MAX) {
        tern_errmsg_printf(errmsg,
                           "message %zu: headers of %zu bytes are over the "
                           "limit of %d bytes",
                           i, hbytes, TERN_HEADERS_BYTES_MAX);
        return TERN_ETOOBIG;
    }
    tern_wbuf_u8(w, PROPS__VERSION);
    tern_wbuf_u8(w, 0);
    tern_wbuf_u64(w, m->producer_ts_ms != 0 ? m->producer_ts_ms : now_ms);
    tern_wbuf_u16(w, (uint16_t)m->key_len);
    tern_wbuf_u8(w, (uint8_t)tag_len);
    tern_wbuf_u8(w, (uint8_t)m->n_headers);
    tern_wbuf_put(w, m->key, m->key_len);
    tern_wbuf_put(w, m->tag, tag_len);
    for (size_t h = 0; h < m->n_headers; h++) {
        const struct tern_header *x = &m->headers[h];
        size_t nl = strlen(x->name);
        tern_wbuf_u8(w, (uint8_t)nl);
        tern_wbuf_put(w, x->name, nl);
        tern_wbuf_u16(w, (uint16_t)x->value_len);
        tern_wbuf_put(w, x->value, x->value_len);
    }
    return w->err;
}

/* Walk a block from the server; *headers (OUT) at the first header. */
static int props_walk(const uint8_t *p,
                      size_t len,
                      struct tern_message_props *out,
                      const uint8_t **headers)
{
    struct tern_cursor c;
    tern_cursor_init(&c, p, len);
    if (tern_cursor_u8(&c) != PROPS__VERSION || tern_cursor_u8(&c) != 0) {
        return TERN_EMALFORMED;
    }
    out->producer_ts_ms = tern_cursor_u64(&c);
    out->key_len = tern_cursor_u16(&c);
    out->tag_len = tern_cursor_u8(&c);
    out->n_headers = tern_cursor_u8(&c);
    out->key = tern_cursor_bytes(&c, out->key_len);
    out->tag = (const char *)tern_cursor_bytes(&c, out->tag_len);
    *headers = c.p;
    for (size_t h = 0; h < out->n_headers && c.err == 0; h++) {
        (void)tern_cursor_bytes(&c, tern_cursor_u8(&c));
        (void)tern_cursor_bytes(&c, tern_cursor_u16(&c));
    }
    if (c.err != 0 || tern_cursor_left(&c) != 0) {
        return TERN_EMALFORMED;
    }
    if (out->key_len == 0) {
        out->key = NULL;
    }
    if (out->tag_len == 0) {
        out->tag = NULL;
    }
    return 0;
}

int tern__props_decode(const void *p,
                       size_t len,
                       struct tern_message_props *out)
{
    const uint8_t *h;
    if (len == 0) {
        out->producer_ts_ms = 0;
        out->key = NULL;
        out->key_len = 0;
        out->tag = NULL;
        out->tag_len = 0;
        out->n_headers = 0;
        return 0;
    }
    return props_walk(p, len, out, &h);
}

int tern__props_header(const void *p,
                       size_t len,
                       size_t i,
                       const char **name,
                       size_t *name_len,
                       const void **value,
                       size_t *value_len)
{
    struct tern_message_props pr;
    const uint8_t *h;
    struct tern_cursor c;
    if (len == 0 || props_walk(p, len, &pr, &h) != 0 || i >= pr.n_headers) {
        return TERN_EINVAL;
    }
    tern_cursor_init(&c, h, len - (size_t)(h - (const uint8_t *)p));
    for (size_t k = 0; k <= i; k++) {
        size_t nl = tern_cursor_u8(&c);
        const char *n = (const char *)tern_cursor_bytes(&c, nl);
        size_t vl = tern_cursor_u16(&c);
        const void *v = tern_cursor_bytes(&c, vl);
        if (k == i) {
            if (name != NULL) {
                *name = n;
            }
            if (name_len != NULL) {
                *name_len = nl;
            }
            if (value != NULL) {
                *value = v;
            }
            if (value_len != NULL) {
                *value_len = vl;
            }
        }
    }
    return 0;
}

int tern__tag_filter_parse(const char *expr,
                           char tags[][TERN_TAG_MAX + 1],
                           uint32_t *n,
                           char *errmsg)
{
    const char *p = expr;
    *n = 0;
    if (expr == NULL) {
        return 0;
    }
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    if (*p == '\0') {
        return 0;
    }
    for (;;) {
        const char *s, *e;
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        s = p;
        while (tag_char(*p)) {
            p++;
        }
        e = p;
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        if (!tag_ok(s, (size_t)(e - s)) || (*p != '\0' && *p != '|')) {
            tern_errmsg_printf(errmsg,
                               "tag filter \"%.100s\": expected tagA || tagB "
                               "with tags of 1..%d bytes of [A-Za-z0-9._-]",
                               expr, TERN_TAG_MAX);
            return TERN_EINVAL;
        }
        if (*n >= TERN_FILTER_TAGS_MAX) {
            tern_errmsg_printf(errmsg, "tag filter \"%.100s\": at most %d tags",
                               expr, TERN_FILTER_TAGS_MAX);
            return TERN_EINVAL;
        }
        memcpy(tags[*n], s, (size_t)(e - s));
        tags[*n][e - s] = '\0';
        (*n)++;
        if (*p == '\0') {
            return 0;
        }
        if (p[1] != '|') {
            tern_errmsg_printf(errmsg,
                               "tag filter \"%.100s\": tags are separated by "
                               "||",
                               expr);
            return TERN_EINVAL;
        }
        p += 2;
    }
}
