/*
 * libtern's retention helpers: the queue options (struct
 * tern_queue_options) and what they become on the wire (the settings of
 * QUEUE_CREATE's tail and of QUEUE_UPDATE, proto/include/proto.h), and
 * the queue info result object, built from a validated QUEUE_INFO answer.
 * The calls themselves are in api.c.
 */
#include <errno.h>

#include "client_int.h"

struct tern_queue_info
{
    uint64_t start_offset;
    uint64_t next_offset;
    uint64_t bytes;
    uint64_t created_index;
    uint64_t max_age_ms;
    uint64_t max_bytes;
    uint64_t max_messages;
    int overflow;
};

void tern_queue_options_init(struct tern_queue_options *o)
{
    o->max_age_ms = TERN_QUEUE_DEFAULT;
    o->max_bytes = TERN_QUEUE_DEFAULT;
    o->max_messages = TERN_QUEUE_DEFAULT;
    o->overflow = TERN_OVERFLOW_DEFAULT;
}

const char *tern_overflow_name(int overflow)
{
    switch (overflow) {
    case TERN_OVERFLOW_DROP_OLDEST:
        return "drop-oldest";
    case TERN_OVERFLOW_REJECT:
        return "reject";
    default:
        return "unknown";
    }
}

int tern__queue_settings(const struct tern_queue_options *o,
                         struct proto_queue_settings *s,
                         uint32_t *mask)
{
    *mask = 0;
    s->max_age_ms = TERN_QUEUE_DEFAULT_MAX_AGE_MS;
    s->max_bytes = 0;
    s->max_messages = 0;
    s->overflow = TERN_OVERFLOW_DROP_OLDEST;
    if (o == NULL) {
        return 0;
    }
    if (o->overflow != TERN_OVERFLOW_DEFAULT &&
        o->overflow != TERN_OVERFLOW_DROP_OLDEST &&
        o->overflow != TERN_OVERFLOW_REJECT) {
        return TERN_EINVAL;
    }
    if (o->max_age_ms != TERN_QUEUE_DEFAULT) {
        s->max_age_ms = o->max_age_ms;
        *mask |= PROTO_SET_MAX_AGE;
    }
    if (o->max_bytes != TERN_QUEUE_DEFAULT) {
        s->max_bytes = o->max_bytes;
        *mask |= PROTO_SET_MAX_BYTES;
    }
    if (o->max_messages != TERN_QUEUE_DEFAULT) {
        s->max_messages = o->max_messages;
        *mask |= PROTO_SET_MAX_MESSAGES;
    }
    if (o->overflow != TERN_OVERFLOW_DEFAULT) {
        s->overflow = (uint8_t)o->overflow;
        *mask |= PROTO_SET_OVERFLOW;
    }
    return 0;
}

struct tern_queue_info *tern__queue_info_new(const void *body, size_t len)
{
    struct proto_queue_info_resp a;
    struct tern_queue_info *q;
    if (proto_decode_queue_info_resp(body, len, &a) != 0) {
        return NULL;
    }
    q = tern_calloc(1, sizeof *q);
    if (q == NULL) {
        return NULL;
    }
    q->start_offset = a.start_offset;
    q->next_offset = a.next_offset;
    q->bytes = a.bytes;
    q->created_index = a.created_index;
    q->max_age_ms = a.settings.max_age_ms;
    q->max_bytes = a.settings.max_bytes;
    q->max_messages = a.settings.max_messages;
    q->overflow = a.settings.overflow;
    return q;
}

int tern__queue_info_check(const void *body, size_t len)
{
    struct proto_queue_info_resp a;
    int rv = proto_decode_queue_info_resp(body, len, &a);
    if (rv == 0 && a.start_offset > a.next_offset) {
        rv = TERN_EMALFORMED;
    }
    return rv;
}

uint64_t tern_queue_info_start_offset(const struct tern_queue_info *q)
{
    return q != NULL ? q->start_offset : 0;
}

uint64_t tern_queue_info_next_offset(const struct tern_queue_info *q)
{
    return q != NULL ? q->next_offset : 0;
}

uint64_t tern_queue_info_messages(const struct tern_queue_info *q)
{
    return q != NULL ? q->next_offset - q->start_offset : 0;
}

uint64_t tern_queue_info_bytes(const struct tern_queue_info *q)
{
    return q != NULL ? q->bytes : 0;
}

uint64_t tern_queue_info_created_index(const struct tern_queue_info *q)
{
    return q != NULL ? q->created_index : 0;
}

uint64_t tern_queue_info_max_age_ms(const struct tern_queue_info *q)
{
    return q != NULL ? q->max_age_ms : 0;
}

uint64_t tern_queue_info_max_bytes(const struct tern_queue_info *q)
{
    return q != NULL ? q->max_bytes : 0;
}

uint64_t tern_queue_info_max_messages(const struct tern_queue_info *q)
{
    return q != NULL ? q->max_messages : 0;
}

int tern_queue_info_overflow(const struct tern_queue_info *q)
{
    return q != NULL ? q->overflow : TERN_OVERFLOW_DROP_OLDEST;
}

void tern_queue_info_free(struct tern_queue_info *q)
{
    tern_free(q);
}
