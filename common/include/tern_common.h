/*
 * common/: shared primitives of the tern modules: error strings and errmsg
 * helpers, checksums, little-endian encoders, a bounded decoding cursor, a
 * growable write buffer, allocator hooks, asserts, an intrusive list and
 * the queue/group name rule. No logic lives here. Prefix tern_.
 *
 * Error convention (see docs/ARCHITECTURE.md): 0 or a negative code; -errno
 * passes through; project codes are in <tern/errors.h>. Detail travels in a
 * caller-provided char errmsg[TERN_ERRMSG_SIZE] buffer.
 */
#ifndef TERN_COMMON_H
#define TERN_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tern/errors.h>

#define TERN_ERRMSG_SIZE 256

/* Static message for a tern code or -errno. Never NULL. */
const char *tern_strerror(int code);
/* Symbolic name ("TERN_EFULL", "ENOENT") for a code. Never NULL. */
const char *tern_err_name(int code);

/* printf into errmsg (may be NULL: then nothing happens). */
void tern_errmsg_printf(char *errmsg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the existing message: "ctx: <old message>". */
void tern_errmsg_wrapf(char *errmsg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checksums (xxhash). tern_checksum32 is the one used in every tern
 * on-disk and on-wire format: XXH32 with seed 0x7465726e ("tern"). */
#define TERN_CHECKSUM_SEED 0x7465726eU
uint32_t tern_checksum32(const void *buf, size_t len);
/* Incremental form: state starts at tern_checksum32_begin(). */
struct tern_checksum_state
{
    uint64_t opaque[6];
};
void tern_checksum32_begin(struct tern_checksum_state *st);
void tern_checksum32_update(struct tern_checksum_state *st,
                            const void *buf,
                            size_t len);
uint32_t tern_checksum32_end(struct tern_checksum_state *st);
/* The checksum of client protocol frames of version 2 (proto.h): the low
 * 32 bits of XXH3_64bits of buf with seed. */
uint32_t tern_checksum32_xxh3(const void *buf, size_t len, uint64_t seed);
/* Incremental form of tern_checksum32_xxh3 (the same value for the same
 * bytes however they are split): state starts at
 * tern_checksum32_xxh3_begin(). The state must be 64-byte aligned: on the
 * stack or in a static, not inside memory from tern_malloc (16 bytes). */
struct tern_checksum3_state
{
    _Alignas(64) unsigned char opaque[640];
};
void tern_checksum32_xxh3_begin(struct tern_checksum3_state *st, uint64_t seed);
void tern_checksum32_xxh3_update(struct tern_checksum3_state *st,
                                 const void *buf,
                                 size_t len);
uint32_t tern_checksum32_xxh3_end(struct tern_checksum3_state *st);
/* For formats whose records or frames say which of the two they carry
 * (rdma/tcp_frame.c, raft/codec.c, index/log.c): tern_checksum32 when
 * xxh3 is false, tern_checksum32_xxh3 with xxh3_seed when true (unused
 * otherwise), picked at begin. On the stack, like tern_checksum3_state. */
struct tern_checksum32_either
{
    struct tern_checksum3_state x3;
    struct tern_checksum_state x32;
    bool xxh3;
};
void tern_checksum32_either_begin(struct tern_checksum32_either *st,
                                  bool xxh3,
                                  uint64_t xxh3_seed);
void tern_checksum32_either_update(struct tern_checksum32_either *st,
                                   const void *buf,
                                   size_t len);
uint32_t tern_checksum32_either_end(struct tern_checksum32_either *st);

/* Allocator hooks. Everything our modules allocate goes through these, so
 * tests can inject failures. tern_alloc_fail_after(n): the n-th next
 * allocation and all after it fail until tern_alloc_fail_after(-1). */
void *tern_malloc(size_t n);
void *tern_calloc(size_t n, size_t size);
void *tern_realloc(void *p, size_t n);
void tern_free(void *p);
char *tern_strdup(const char *s);
void tern_alloc_fail_after(long n);

/* Little-endian load/store; unaligned access is fine. */
/* One unaligned load or store each (memcpy, which compilers emit as a
 * single mov), swapped only on a big-endian host: these run for every
 * field of every format, and the byte-at-a-time loops they replace stayed
 * loops at -O2 (a producer row's decode was 3% of a node's CPU). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TERN__LE16(v) __builtin_bswap16(v)
#define TERN__LE32(v) __builtin_bswap32(v)
#define TERN__LE64(v) __builtin_bswap64(v)
#else
#define TERN__LE16(v) (v)
#define TERN__LE32(v) (v)
#define TERN__LE64(v) (v)
#endif
static inline void tern_put_u16(void *p, uint16_t v)
{
    v = TERN__LE16(v);
    memcpy(p, &v, sizeof v);
}
static inline void tern_put_u32(void *p, uint32_t v)
{
    v = TERN__LE32(v);
    memcpy(p, &v, sizeof v);
}
static inline void tern_put_u64(void *p, uint64_t v)
{
    v = TERN__LE64(v);
    memcpy(p, &v, sizeof v);
}
static inline uint16_t tern_get_u16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return TERN__LE16(v);
}
static inline uint32_t tern_get_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return TERN__LE32(v);
}
static inline uint64_t tern_get_u64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return TERN__LE64(v);
}

/* Bounded cursor for decoding untrusted bytes: every get checks the bound
 * and sets ->err (sticky) instead of reading past the end. */
struct tern_cursor
{
    const uint8_t *p;
    const uint8_t *end;
    int err; /* 0 or TERN_EMALFORMED */
};
static inline void tern_cursor_init(struct tern_cursor *c,
                                    const void *buf,
                                    size_t len)
{
    c->p = buf;
    c->end = c->p + len;
    c->err = 0;
}
static inline int tern_cursor_need(struct tern_cursor *c, size_t n)
{
    if (c->err != 0 || (size_t)(c->end - c->p) < n) {
        c->err = TERN_EMALFORMED;
        return 0;
    }
    return 1;
}
static inline size_t tern_cursor_left(const struct tern_cursor *c)
{
    return (size_t)(c->end - c->p);
}
static inline uint8_t tern_cursor_u8(struct tern_cursor *c)
{
    return tern_cursor_need(c, 1) ? *c->p++ : 0;
}
static inline uint16_t tern_cursor_u16(struct tern_cursor *c)
{
    uint16_t v = 0;
    if (tern_cursor_need(c, 2)) {
        v = tern_get_u16(c->p);
        c->p += 2;
    }
    return v;
}
static inline uint32_t tern_cursor_u32(struct tern_cursor *c)
{
    uint32_t v = 0;
    if (tern_cursor_need(c, 4)) {
        v = tern_get_u32(c->p);
        c->p += 4;
    }
    return v;
}
static inline uint64_t tern_cursor_u64(struct tern_cursor *c)
{
    uint64_t v = 0;
    if (tern_cursor_need(c, 8)) {
        v = tern_get_u64(c->p);
        c->p += 8;
    }
    return v;
}
/* Borrow n bytes from the cursor (NULL on error); valid as long as the
 * underlying buffer. */
static inline const uint8_t *tern_cursor_bytes(struct tern_cursor *c, size_t n)
{
    const uint8_t *p = NULL;
    if (tern_cursor_need(c, n)) {
        p = c->p;
        c->p += n;
    }
    return p;
}

/* Growable output buffer for encoders. Owned by the caller; free with
 * tern_wbuf_free. On allocation failure ->err becomes -ENOMEM (sticky). */
struct tern_wbuf
{
    uint8_t *base;
    size_t len;
    size_t cap;
    int err;
};
void tern_wbuf_init(struct tern_wbuf *w);
/* tern_wbuf_init with room for cap bytes when memory allows (a hint: no
 * error when it does not, the buffer then grows as usual). An encoder that
 * knows its bound saves the copies of growing by doubling. */
void tern_wbuf_init_cap(struct tern_wbuf *w, size_t cap);
/* Give back the room past w->len when more than slack bytes of it are
 * unused (a hint: the buffer stays as it is when memory does not allow),
 * e.g. an answer begun at its bound that came out smaller. */
void tern_wbuf_trim(struct tern_wbuf *w, size_t slack);
void tern_wbuf_free(struct tern_wbuf *w);
/* Ensure room for n more bytes; returns a pointer to write at or NULL. */
uint8_t *tern_wbuf_reserve(struct tern_wbuf *w, size_t n);
void tern_wbuf_put(struct tern_wbuf *w, const void *p, size_t n);
void tern_wbuf_u8(struct tern_wbuf *w, uint8_t v);
void tern_wbuf_u16(struct tern_wbuf *w, uint16_t v);
void tern_wbuf_u32(struct tern_wbuf *w, uint32_t v);
void tern_wbuf_u64(struct tern_wbuf *w, uint64_t v);

/* Intrusive doubly linked list: circular, the head is a sentinel that no
 * element contains. An element's links belong to the list while it is on
 * it; tern_list_remove leaves the element linked to itself, so removing
 * twice is harmless. No allocation. */
struct tern_list
{
    struct tern_list *prev;
    struct tern_list *next;
};
static inline void tern_list_init(struct tern_list *l)
{
    l->prev = l;
    l->next = l;
}
static inline bool tern_list_empty(const struct tern_list *l)
{
    return l->next == l;
}
/* Append e at the tail of the list headed by l. */
static inline void tern_list_push(struct tern_list *l, struct tern_list *e)
{
    e->prev = l->prev;
    e->next = l;
    l->prev->next = e;
    l->prev = e;
}
static inline void tern_list_remove(struct tern_list *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e;
    e->next = e;
}
/* The struct of the given type that holds member at ptr. */
#define TERN_CONTAINER(ptr, type, member)                                      \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Queue and consumer-group names, the one rule every module applies: 1 to
 * TERN_NAME_MAX bytes of [A-Za-z0-9._-], no NUL. s may be NULL (invalid);
 * it need not be NUL-terminated. Returns 1 if valid, else 0. */
#define TERN_NAME_MAX 200
int tern_name_valid(const char *s, size_t len);

/* Namespaced queue names (docs/AUTH.md, as RocketMQ wraps a topic in its
 * namespace): a queue of namespace "default" is stored under its own name,
 * a queue q of namespace ns under "ns%q". The separator cannot occur in a
 * name, so the split is unambiguous; the whole stays within TERN_NAME_MAX,
 * which bounds a namespaced queue's own name to TERN_NAME_MAX - 1 -
 * strlen(ns). Clients never send '%': the server qualifies the names of
 * a connection's namespace. */
#define TERN_NS_SEP      '%'
#define TERN_NS_NAME_MAX 64
#define TERN_NS_DEFAULT  "default"
/* 1 if s[0..len) is a plain name or "ns%name" (ns 1..TERN_NS_NAME_MAX
 * bytes, neither part empty, each passing tern_name_valid, the whole at
 * most TERN_NAME_MAX bytes), else 0. */
int tern_qname_valid(const char *s, size_t len);
/* Split a valid qualified name: *ns = s and *ns_len its length (0 for a
 * plain name: namespace "default"), *name the queue's own name (all
 * borrowed from s). */
void tern_qname_split(const char *s,
                      size_t len,
                      const char **ns,
                      size_t *ns_len,
                      const char **name,
                      size_t *name_len);
/* Write the stored name of queue name in namespace ns (NULL, "" or
 * "default": name itself) to buf[0..cap) with a NUL. Returns its length,
 * or TERN_EBADNAME when a part is invalid or the whole would exceed
 * TERN_NAME_MAX (or cap - 1). */
int tern_qname_join(char *buf, size_t cap, const char *ns, const char *name);

/* Asserts. TERN_ASSERT is debug-only; TERN_INVARIANT is always on and is
 * reserved for durability-critical invariants (prints, then aborts). */
void tern_invariant_failed(const char *expr, const char *file, int line);
#define TERN_INVARIANT(x)                                                      \
    ((x) ? (void)0 : tern_invariant_failed(#x, __FILE__, __LINE__))
#ifdef NDEBUG
#define TERN_ASSERT(x) ((void)0)
#else
#define TERN_ASSERT(x) TERN_INVARIANT(x)
#endif

#define TERN_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define TERN_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define TERN_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* TERN_COMMON_H */
