/* Allocator hooks with failure injection, and the growable write buffer. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "tern_common.h"

static _Atomic long fail_countdown = -1;

static int should_fail(void)
{
    long n = atomic_load(&fail_countdown);
    if (n < 0) {
        return 0;
    }
    if (n == 0) {
        return 1;
    }
    atomic_fetch_sub(&fail_countdown, 1);
    return 0;
}

void tern_alloc_fail_after(long n)
{
    atomic_store(&fail_countdown, n);
}

void *tern_malloc(size_t n)
{
    return should_fail() ? NULL : malloc(n);
}

void *tern_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n, size);
}

void *tern_realloc(void *p, size_t n)
{
    return should_fail() ? NULL : realloc(p, n);
}

void tern_free(void *p)
{
    free(p);
}

char *tern_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tern_malloc(n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

void tern_wbuf_init(struct tern_wbuf *w)
{
    w->base = NULL;
    w->len = 0;
    w->cap = 0;
    w->err = 0;
}

void tern_wbuf_init_cap(struct tern_wbuf *w, size_t cap)
{
    tern_wbuf_init(w);
    w->base = cap > 0 ? tern_malloc(cap) : NULL;
    w->cap = w->base != NULL ? cap : 0;
}

void tern_wbuf_trim(struct tern_wbuf *w, size_t slack)
{
    if (w->err == 0 && w->base != NULL && w->len > 0 &&
        w->cap - w->len > slack) {
        uint8_t *p = tern_realloc(w->base, w->len);
        if (p != NULL) {
            w->base = p;
            w->cap = w->len;
        }
    }
}

void tern_wbuf_free(struct tern_wbuf *w)
{
    tern_free(w->base);
    tern_wbuf_init(w);
}

uint8_t *tern_wbuf_reserve(struct tern_wbuf *w, size_t n)
{
    if (w->err != 0) {
        return NULL;
    }
    if (w->cap - w->len < n) {
        size_t cap = w->cap != 0 ? w->cap : 256;
        while (cap - w->len < n) {
            cap *= 2;
        }
        uint8_t *p = tern_realloc(w->base, cap);
        if (p == NULL) {
            w->err = -ENOMEM;
            return NULL;
        }
        w->base = p;
        w->cap = cap;
    }
    return w->base + w->len;
}

void tern_wbuf_put(struct tern_wbuf *w, const void *p, size_t n)
{
    uint8_t *d = tern_wbuf_reserve(w, n);
    if (d != NULL) {
        if (n > 0) {
            memcpy(d, p, n);
        }
        w->len += n;
    }
}

void tern_wbuf_u8(struct tern_wbuf *w, uint8_t v)
{
    tern_wbuf_put(w, &v, 1);
}

void tern_wbuf_u16(struct tern_wbuf *w, uint16_t v)
{
    uint8_t b[2];
    tern_put_u16(b, v);
    tern_wbuf_put(w, b, 2);
}

void tern_wbuf_u32(struct tern_wbuf *w, uint32_t v)
{
    uint8_t b[4];
    tern_put_u32(b, v);
    tern_wbuf_put(w, b, 4);
}

void tern_wbuf_u64(struct tern_wbuf *w, uint64_t v)
{
    uint8_t b[8];
    tern_put_u64(b, v);
    tern_wbuf_put(w, b, 8);
}
