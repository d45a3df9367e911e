/*
 * tests/unit/raft/fake_io.c: in-memory inner raft_io with manually
 * completed disk operations and a manual clock (see fake_io.h). It follows
 * the raft_io contract of libraft 0.15: appends complete in submission
 * order, truncate takes effect after in-flight appends and before later
 * ones, load hands out raft_malloc'd memory with a batch per entry.
 */
#include "fake_io.h"

#include <stdlib.h>
#include <string.h>

enum { OP_APPEND, OP_TRUNCATE, OP_PUT, OP_GET };

struct fake_op
{
    struct fake_op *next;
    int type;
    uint64_t index; /* append: first index; truncate: index */
    struct fake_entry *entries;
    unsigned n;
    struct raft_io_append *append_req;
    raft_io_append_cb append_cb;
    int status;
    /* put */
    unsigned trailing;
    struct raft_io_snapshot_put *put_req;
    raft_io_snapshot_put_cb put_cb;
    uint64_t snap_index, snap_term, snap_conf_index;
    struct raft_configuration snap_conf;
    void *snap_data;
    size_t snap_len;
    /* get */
    struct raft_io_snapshot_get *get_req;
    raft_io_snapshot_get_cb get_cb;
};

static void *xmemdup(const void *p, size_t n)
{
    void *q = malloc(n > 0 ? n : 1);
    if (n > 0) {
        memcpy(q, p, n);
    }
    return q;
}

static void conf_copy(const struct raft_configuration *src,
                      struct raft_configuration *dst)
{
    raft_configuration_init(dst);
    for (unsigned i = 0; i < src->n; i++) {
        raft_configuration_add(dst, src->servers[i].id, src->servers[i].address,
                               src->servers[i].role);
    }
}

void fake_disk_init(struct fake_disk *d)
{
    memset(d, 0, sizeof *d);
    d->start = 1;
    raft_configuration_init(&d->snap_conf);
}

static void disk_truncate(struct fake_disk *d, uint64_t index)
{
    while (d->n > 0 && d->start + d->n - 1 >= index) {
        d->n--;
        free(d->entries[d->n].buf);
    }
}

void fake_disk_close(struct fake_disk *d)
{
    disk_truncate(d, 0);
    free(d->entries);
    raft_configuration_close(&d->snap_conf);
    free(d->snap_data);
    memset(d, 0, sizeof *d);
}

const struct fake_entry *fake_disk_get(const struct fake_disk *d,
                                       uint64_t index)
{
    if (index < d->start || index >= d->start + d->n) {
        return NULL;
    }
    return &d->entries[index - d->start];
}

uint64_t fake_disk_last_index(const struct fake_disk *d)
{
    if (d->n > 0) {
        return d->start + d->n - 1;
    }
    return d->snap_index;
}

static void disk_push(struct fake_disk *d,
                      uint64_t index,
                      const struct fake_entry *e)
{
    if (d->n == 0) {
        d->start = index;
    }
    if (index != d->start + d->n) {
        abort(); /* the fake's own invariant: no holes */
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        d->entries = realloc(d->entries, d->cap * sizeof *d->entries);
    }
    d->entries[d->n].term = e->term;
    d->entries[d->n].type = e->type;
    d->entries[d->n].len = e->len;
    d->entries[d->n].buf = xmemdup(e->buf, e->len);
    d->n++;
}

static struct fake_io *fio(struct raft_io *io)
{
    return (struct fake_io *)io;
}

static void push_op(struct fake_io *f, struct fake_op *op)
{
    if (f->ops_tail == NULL) {
        f->ops_head = op;
    } else {
        f->ops_tail->next = op;
    }
    f->ops_tail = op;
}

static void free_op(struct fake_op *op)
{
    for (unsigned i = 0; i < op->n; i++) {
        free(op->entries[i].buf);
    }
    free(op->entries);
    if (op->type == OP_PUT) {
        raft_configuration_close(&op->snap_conf);
        free(op->snap_data);
    }
    free(op);
}

static int f_init(struct raft_io *io, raft_id id, const char *address)
{
    (void)io;
    (void)id;
    (void)address;
    return 0;
}

static void f_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct fake_io *f = fio(io);
    f->closing = true;
    f->close_cb = cb;
    /* A crash: nothing queued becomes durable. */
    while (f->ops_head != NULL) {
        struct fake_op *op = f->ops_head;
        f->ops_head = op->next;
        if (op->type == OP_APPEND) {
            op->append_cb(op->append_req, RAFT_CANCELED);
        } else if (op->type == OP_PUT) {
            op->put_cb(op->put_req, RAFT_CANCELED);
        }
        free_op(op);
    }
    f->ops_tail = NULL;
    while (f->gets != NULL) {
        struct fake_op *op = f->gets;
        f->gets = op->next;
        op->get_cb(op->get_req, NULL, RAFT_CANCELED);
        free_op(op);
    }
}

static struct raft_snapshot *snapshot_copy(const struct fake_disk *d)
{
    struct raft_snapshot *s = raft_calloc(1, sizeof *s);
    s->index = d->snap_index;
    s->term = d->snap_term;
    s->configuration_index = d->snap_conf_index;
    raft_configuration_init(&s->configuration);
    for (unsigned i = 0; i < d->snap_conf.n; i++) {
        raft_configuration_add(&s->configuration, d->snap_conf.servers[i].id,
                               d->snap_conf.servers[i].address,
                               d->snap_conf.servers[i].role);
    }
    s->bufs = raft_malloc(sizeof *s->bufs);
    s->bufs[0].base = raft_malloc(d->snap_len > 0 ? d->snap_len : 1);
    memcpy(s->bufs[0].base, d->snap_data, d->snap_len);
    s->bufs[0].len = d->snap_len;
    s->n_bufs = 1;
    return s;
}

static int f_load(struct raft_io *io,
                  raft_term *term,
                  raft_id *voted_for,
                  struct raft_snapshot **snapshot,
                  raft_index *start_index,
                  struct raft_entry *entries[],
                  size_t *n_entries)
{
    struct fake_io *f = fio(io);
    struct fake_disk *d = f->disk;
    *term = d->term;
    *voted_for = d->vote;
    *snapshot = d->snap_index != 0 ? snapshot_copy(d) : NULL;
    *start_index = d->n > 0 ? d->start : d->snap_index + 1;
    *entries = NULL;
    *n_entries = d->n;
    if (d->n > 0) {
        *entries = raft_calloc(d->n, sizeof **entries);
        for (size_t i = 0; i < d->n; i++) {
            struct raft_entry *e = &(*entries)[i];
            e->term = d->entries[i].term;
            e->type = d->entries[i].type;
            e->buf.len = d->entries[i].len;
            e->buf.base = raft_malloc(e->buf.len > 0 ? e->buf.len : 1);
            memcpy(e->buf.base, d->entries[i].buf, e->buf.len);
            e->batch = e->buf.base;
        }
    }
    f->next_index = *start_index + *n_entries;
    return 0;
}

static int f_start(struct raft_io *io,
                   unsigned msecs,
                   raft_io_tick_cb tick,
                   raft_io_recv_cb recv)
{
    struct fake_io *f = fio(io);
    (void)recv;
    f->tick = tick;
    f->tick_ms = msecs;
    f->next_tick = *f->clock + msecs;
    return 0;
}

static int f_bootstrap(struct raft_io *io, const struct raft_configuration *c)
{
    struct fake_io *f = fio(io);
    struct fake_disk *d = f->disk;
    struct raft_buffer buf;
    struct fake_entry e;
    if (d->term != 0 || d->n != 0 || d->snap_index != 0) {
        return RAFT_CANTBOOTSTRAP;
    }
    if (raft_configuration_encode(c, &buf) != 0) {
        return RAFT_NOMEM;
    }
    e.term = 1;
    e.type = RAFT_CHANGE;
    e.buf = buf.base;
    e.len = buf.len;
    disk_push(d, 1, &e);
    raft_free(buf.base);
    d->term = 1;
    return 0;
}

static int f_recover(struct raft_io *io, const struct raft_configuration *c)
{
    (void)io;
    (void)c;
    return RAFT_INVALID;
}

static int f_set_term(struct raft_io *io, raft_term term)
{
    struct fake_io *f = fio(io);
    f->disk->term = term;
    f->disk->vote = 0;
    return 0;
}

static int f_set_vote(struct raft_io *io, raft_id id)
{
    fio(io)->disk->vote = id;
    return 0;
}

static int f_send(struct raft_io *io,
                  struct raft_io_send *req,
                  const struct raft_message *m,
                  raft_io_send_cb cb)
{
    (void)io;
    (void)req;
    (void)m;
    (void)cb;
    return RAFT_NOCONNECTION; /* never used: the wrapper sends */
}

static int f_append(struct raft_io *io,
                    struct raft_io_append *req,
                    const struct raft_entry entries[],
                    unsigned n,
                    raft_io_append_cb cb)
{
    struct fake_io *f = fio(io);
    struct fake_op *op;
    if (f->fail_next_submit != 0) {
        int rv = f->fail_next_submit;
        f->fail_next_submit = 0;
        return rv; /* nothing queued, no callback */
    }
    if (f->on_append != NULL) {
        f->on_append(f->on_append_arg, f->next_index, n);
    }
    op = calloc(1, sizeof *op);
    op->type = OP_APPEND;
    op->index = f->next_index;
    op->n = n;
    op->entries = calloc(n, sizeof *op->entries);
    for (unsigned i = 0; i < n; i++) {
        op->entries[i].term = entries[i].term;
        op->entries[i].type = entries[i].type;
        op->entries[i].len = entries[i].buf.len;
        op->entries[i].buf = xmemdup(entries[i].buf.base, entries[i].buf.len);
    }
    op->append_req = req;
    op->append_cb = cb;
    op->status = f->fail_next_append;
    f->fail_next_append = 0;
    f->next_index += n;
    push_op(f, op);
    return 0;
}

static int f_truncate(struct raft_io *io, raft_index index)
{
    struct fake_io *f = fio(io);
    struct fake_op *op = calloc(1, sizeof *op);
    op->type = OP_TRUNCATE;
    op->index = index;
    f->next_index = index;
    push_op(f, op);
    return 0;
}

static int f_snapshot_put(struct raft_io *io,
                          unsigned trailing,
                          struct raft_io_snapshot_put *req,
                          const struct raft_snapshot *s,
                          raft_io_snapshot_put_cb cb)
{
    struct fake_io *f = fio(io);
    struct fake_op *op = calloc(1, sizeof *op);
    size_t len = 0;
    op->type = OP_PUT;
    op->trailing = trailing;
    op->put_req = req;
    op->put_cb = cb;
    op->snap_index = s->index;
    op->snap_term = s->term;
    op->snap_conf_index = s->configuration_index;
    conf_copy(&s->configuration, &op->snap_conf);
    for (unsigned i = 0; i < s->n_bufs; i++) {
        len += s->bufs[i].len;
    }
    op->snap_data = malloc(len > 0 ? len : 1);
    op->snap_len = 0;
    for (unsigned i = 0; i < s->n_bufs; i++) {
        memcpy((char *)op->snap_data + op->snap_len, s->bufs[i].base,
               s->bufs[i].len);
        op->snap_len += s->bufs[i].len;
    }
    if (trailing == 0) {
        f->next_index = s->index + 1;
    }
    push_op(f, op);
    return 0;
}

static int f_snapshot_get(struct raft_io *io,
                          struct raft_io_snapshot_get *req,
                          raft_io_snapshot_get_cb cb)
{
    struct fake_io *f = fio(io);
    struct fake_op *op = calloc(1, sizeof *op);
    op->type = OP_GET;
    op->get_req = req;
    op->get_cb = cb;
    op->next = f->gets;
    f->gets = op;
    return 0;
}

static raft_time f_time(struct raft_io *io)
{
    return *fio(io)->clock;
}

static int f_random(struct raft_io *io, int min, int max)
{
    struct fake_io *f = fio(io);
    if (f->fixed_random >= 0) {
        return f->fixed_random < max - min ? min + f->fixed_random : max - 1;
    }
    f->seed = f->seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return min + (int)((f->seed >> 33) % (uint64_t)(max - min));
}

void fake_io_init(struct fake_io *f,
                  struct fake_disk *disk,
                  const uint64_t *clock,
                  uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->disk = disk;
    f->clock = clock;
    f->seed = seed;
    f->next_index = 1;
    f->fixed_random = -1;
    f->io.version = 1;
    f->io.init = f_init;
    f->io.close = f_close;
    f->io.load = f_load;
    f->io.start = f_start;
    f->io.bootstrap = f_bootstrap;
    f->io.recover = f_recover;
    f->io.set_term = f_set_term;
    f->io.set_vote = f_set_vote;
    f->io.send = f_send;
    f->io.append = f_append;
    f->io.truncate = f_truncate;
    f->io.snapshot_put = f_snapshot_put;
    f->io.snapshot_get = f_snapshot_get;
    f->io.time = f_time;
    f->io.random = f_random;
}

static void apply_put(struct fake_disk *d, struct fake_op *op)
{
    raft_configuration_close(&d->snap_conf);
    d->snap_conf = op->snap_conf;
    raft_configuration_init(&op->snap_conf);
    free(d->snap_data);
    d->snap_data = op->snap_data;
    op->snap_data = NULL;
    d->snap_len = op->snap_len;
    d->snap_index = op->snap_index;
    d->snap_term = op->snap_term;
    d->snap_conf_index = op->snap_conf_index;
    if (op->trailing == 0) {
        disk_truncate(d, 0);
        d->n = 0;
        d->start = op->snap_index + 1;
    } else if (op->snap_index > op->trailing) {
        uint64_t keep_from = op->snap_index - op->trailing + 1;
        size_t drop = 0;
        while (drop < d->n && d->start + drop < keep_from) {
            free(d->entries[drop].buf);
            drop++;
        }
        memmove(d->entries, d->entries + drop,
                (d->n - drop) * sizeof *d->entries);
        d->n -= drop;
        d->start += drop;
    }
}

size_t fake_io_complete(struct fake_io *f, size_t n)
{
    size_t done = 0;
    while (done < n && f->ops_head != NULL && !f->closing) {
        struct fake_op *op = f->ops_head;
        f->ops_head = op->next;
        if (f->ops_head == NULL) {
            f->ops_tail = NULL;
        }
        switch (op->type) {
        case OP_APPEND:
            if (op->status == 0) {
                disk_truncate(f->disk, op->index);
                for (unsigned i = 0; i < op->n; i++) {
                    disk_push(f->disk, op->index + i, &op->entries[i]);
                }
            }
            op->append_cb(op->append_req, op->status);
            break;
        case OP_TRUNCATE:
            disk_truncate(f->disk, op->index);
            break;
        case OP_PUT:
            apply_put(f->disk, op);
            op->put_cb(op->put_req, 0);
            break;
        default:
            break;
        }
        free_op(op);
        done++;
    }
    return done;
}

size_t fake_io_pending(const struct fake_io *f)
{
    size_t n = 0;
    for (const struct fake_op *op = f->ops_head; op != NULL; op = op->next) {
        n++;
    }
    return n;
}

size_t fake_io_flush(struct fake_io *f)
{
    size_t n = 0;
    while (f->gets != NULL && !f->closing) {
        struct fake_op *op = f->gets;
        f->gets = op->next;
        if (f->disk->snap_index == 0) {
            op->get_cb(op->get_req, NULL, RAFT_NOTFOUND);
        } else {
            op->get_cb(op->get_req, snapshot_copy(f->disk), 0);
        }
        free_op(op);
        n++;
    }
    if (f->closing && !f->closed && f->close_cb != NULL) {
        f->closed = true;
        f->close_cb(&f->io);
        n++;
    }
    return n;
}

int fake_io_maybe_tick(struct fake_io *f)
{
    if (f->tick == NULL || f->closing || *f->clock < f->next_tick) {
        return 0;
    }
    f->next_tick = *f->clock + f->tick_ms;
    f->tick(&f->io);
    return 1;
}
