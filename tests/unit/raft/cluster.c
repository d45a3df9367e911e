/*
 * tests/unit/raft/cluster.c: the deterministic cluster harness (see
 * cluster.h).
 */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include "../rm_tree.h"

/* ---- test FSM ----------------------------------------------------------- */

static void buf_put(uint8_t **b,
                    size_t *len,
                    size_t *cap,
                    const void *p,
                    size_t n)
{
    if (n == 0) {
        return;
    }
    if (*len + n > *cap) {
        *cap = (*len + n) * 2 + 64;
        *b = realloc(*b, *cap);
    }
    memcpy(*b + *len, p, n);
    *len += n;
}

static void stream_put(struct cnode *n, const void *p, size_t len)
{
    buf_put(&n->stream, &n->stream_len, &n->stream_cap, p, len);
}

static int fsm_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct cnode *n = arg;
    struct cluster *c = n->c;
    uint32_t sum;
    if (n->fail_apply != 0) {
        int rv = n->fail_apply;
        n->fail_apply = 0;
        return rv;
    }
    if (index <= n->applied_index) {
        return 0; /* replay after restart: idempotent */
    }
    if (n->bulk_pending != 0 && n->repl != NULL && n->repl->bulk.fetch.active) {
        n->applies_over_bulk++;
    }
    if (n->staging) {
        /* The log moved past the staged bytes' position (index/). */
        if (n->bulk_pending != 0 && c->refuse_over_bulk) {
            return TERN_EINVAL;
        }
        if (n->bulk_pending != 0) {
            n->bulk_dropped++;
        }
        n->staging = false;
        n->stage_len = 0;
        n->bulk_pending = 0;
    }
    sum = tern_checksum32(buf, len) ^ (uint32_t)len;
    if (index < CLUSTER_MAX_INDEX) {
        if (c->applied_set[index] && c->applied_sum[index] != sum) {
            c->conflict = true;
        }
        c->applied_set[index] = true;
        c->applied_sum[index] = sum;
    }
    stream_put(n, buf, len);
    n->applied_index = index;
    n->n_applied++;
    return 0;
}

static int fsm_snapshot(void *arg,
                        uint64_t last_applied,
                        void **manifest,
                        size_t *len)
{
    struct cnode *n = arg;
    uint8_t *m = tern_malloc(16);
    if (m == NULL) {
        return -12;
    }
    tern_put_u64(m, n->stream_len);
    tern_put_u64(m + 8, last_applied);
    *manifest = m;
    *len = 16;
    return 0;
}

static int fsm_restore(void *arg, const void *manifest, size_t len)
{
    struct cnode *n = arg;
    uint64_t slen, idx;
    if (len != 16) {
        return TERN_EMALFORMED;
    }
    slen = tern_get_u64(manifest);
    idx = tern_get_u64((const uint8_t *)manifest + 8);
    n->n_restores++;
    n->bulk_pending = 0;
    if (idx <= n->applied_index) {
        n->staging = false; /* already there (durable FSM ahead) */
        n->stage_len = 0;
        return 0;
    }
    if (n->staging && n->stage_len >= slen) {
        n->stream_len = 0;
        stream_put(n, n->stage, slen);
    } else if (n->stream_len < slen) {
        return TERN_EINVAL; /* bulk data missing */
    }
    n->stream_len = slen;
    n->applied_index = idx;
    n->staging = false;
    n->stage_len = 0;
    return 0;
}

static int fsm_bulk_range(void *arg,
                          const void *manifest,
                          size_t len,
                          uint64_t *from,
                          uint64_t *to)
{
    struct cnode *n = arg;
    if (len != 16) {
        return TERN_EMALFORMED;
    }
    if (!n->staging) {
        /* Our applied stream is a prefix of the leader's: start there. */
        n->staging = true;
        n->stage_len = 0;
        buf_put(&n->stage, &n->stage_len, &n->stage_cap, n->stream,
                n->stream_len);
    }
    *from = n->stage_len;
    *to = tern_get_u64(manifest);
    if (*to < *from) {
        *to = *from;
    }
    return 0;
}

static int fsm_bulk_read(void *arg,
                         uint64_t pos,
                         void *buf,
                         size_t cap,
                         size_t *out)
{
    struct cnode *n = arg;
    size_t k = 0;
    if (n->bulk_reads_ok == 0) {
        return TERN_EINVAL;
    }
    if (n->bulk_reads_ok > 0) {
        n->bulk_reads_ok--;
    }
    if (pos < n->stream_len) {
        k = n->stream_len - (size_t)pos;
        if (k > cap) {
            k = cap;
        }
        memcpy(buf, n->stream + pos, k);
    }
    *out = k;
    return 0;
}

static int fsm_bulk_write(void *arg, uint64_t pos, const void *buf, size_t len)
{
    struct cnode *n = arg;
    if (!n->staging || pos != n->stage_len) {
        return TERN_EINVAL;
    }
    buf_put(&n->stage, &n->stage_len, &n->stage_cap, buf, len);
    n->bulk_pending += len;
    return 0;
}

static void state_cb(void *arg,
                     enum repl_role role,
                     uint64_t leader,
                     uint64_t term,
                     bool writable)
{
    struct cnode *n = arg;
    n->role = role;
    n->leader = leader;
    n->term = term;
    n->writable = writable;
}

/* ---- cluster ----------------------------------------------------------- */

void cluster_init(struct cluster *c, unsigned n)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->guard = true;
    c->snapshot_bytes = (uint64_t)64 << 20;
    c->trailing = 256;
    c->clock = 1000;
    cr_assert_eq(xport_mem_net_new(&c->net), 0);
    for (unsigned i = 0; i < n; i++) {
        struct cnode *nd = &c->nodes[i];
        nd->c = c;
        nd->i = i;
        nd->id = i + 1;
        nd->timeout_offset = -1;
        nd->bulk_reads_ok = -1;
        (void)snprintf(nd->addr, sizeof nd->addr, "127.0.0.1:%u", 9001 + i);
        fake_disk_init(&nd->disk);
    }
}

int cluster_try_start(struct cluster *c, unsigned i, char *errmsg)
{
    struct cnode *nd = &c->nodes[i];
    struct repl_peer peers[CLUSTER_MAX];
    struct repl_config cfg = {0};
    struct repl_fsm fsm = {0};
    int rv;

    cr_assert(!nd->up);
    unsigned n_peers = c->n_boot != 0 ? c->n_boot : c->n;

    for (unsigned k = 0; k < n_peers; k++) {
        peers[k].id = c->nodes[k].id;
        peers[k].address = c->nodes[k].addr;
    }
    if (c->meta && nd->meta_dir[0] == '\0') {
        (void)snprintf(nd->meta_dir, sizeof nd->meta_dir,
                       "/tmp/tern-meta-XXXXXX");
        cr_assert_not_null(mkdtemp(nd->meta_dir));
    }
    cfg.id = nd->id;
    cfg.address = nd->addr;
    cfg.data_dir = c->meta ? nd->meta_dir : NULL;
    cfg.peers = peers;
    cfg.n_peers = n_peers;
    cfg.join = i >= n_peers || nd->join;
    cfg.no_auto_rejoin = c->no_auto_rejoin;
    cfg.snapshot_threshold_bytes = c->snapshot_bytes;
    cfg.snapshot_trailing = c->trailing;
    cfg.durability = c->durability;
    cfg.max_term_jump = c->max_term_jump;
    fsm.arg = nd;
    fsm.apply = fsm_apply;
    fsm.snapshot = fsm_snapshot;
    fsm.restore = fsm_restore;
    fsm.bulk_range = fsm_bulk_range;
    fsm.bulk_read = fsm_bulk_read;
    fsm.bulk_write = fsm_bulk_write;

    nd->io = calloc(1, sizeof *nd->io);
    fake_io_init(nd->io, &nd->disk, &c->clock, 0x9e3779b97f4a7c15ULL * nd->id);
    nd->io->fixed_random = nd->timeout_offset;
    cr_assert_eq(xport_mem_new(c->net, nd->id, &nd->x), 0);
    nd->tx = NULL;
    if (c->use_txport) {
        cr_assert_eq(txport_new(nd->x, c->max_message, c->fencing, &nd->tx), 0);
        nd->x = &nd->tx->base;
    }
    rv = repl_new_with_io(NULL, nd->x, &cfg, &fsm, state_cb, nd, &nd->io->io,
                          &nd->repl, errmsg);
    cr_assert_eq(rv, 0, "repl_new_with_io: %s", errmsg);
    repl_set_guard(nd->repl, c->guard);
    if (c->bulk_chunk != 0) {
        nd->repl->bulk.chunk = c->bulk_chunk;
    }
    nd->bulk_pending = 0; /* a restart drops un-indexed bytes (index/) */
    nd->role = REPL_UNAVAILABLE;
    nd->writable = false;
    nd->leader = 0;
    nd->frozen = false;
    rv = repl_start(nd->repl, errmsg);
    nd->up = true;
    if (rv != 0) {
        cluster_crash(c, i);
    }
    return rv;
}

void cluster_start(struct cluster *c, unsigned i)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    int rv = cluster_try_start(c, i, errmsg);
    cr_assert_eq(rv, 0, "repl_start: %s", errmsg);
}

static void closed_cb(void *arg)
{
    *(bool *)arg = true;
}

void cluster_crash(struct cluster *c, unsigned i)
{
    struct cnode *nd = &c->nodes[i];
    bool done = false;
    if (!nd->up) {
        return;
    }
    nd->up = false;
    repl_close(nd->repl, closed_cb, &done);
    fake_io_flush(nd->io); /* fires the inner close cb */
    cr_assert(done, "repl_close did not complete");
    nd->repl = NULL;
    xport_close(nd->x, NULL, NULL);
    nd->x = NULL;
    nd->tx = NULL;
    free(nd->io);
    nd->io = NULL;
    nd->role = REPL_UNAVAILABLE;
    nd->writable = false;
}

void cluster_fini(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        cr_expect_eq(c->nodes[i].applies_over_bulk, 0,
                     "node %u applied %llu entries over un-adopted bulk bytes",
                     i, (unsigned long long)c->nodes[i].applies_over_bulk);
        cluster_crash(c, i);
    }
    xport_mem_net_complete(c->net);
    xport_mem_net_free(c->net);
    for (unsigned i = 0; i < c->n; i++) {
        fake_disk_close(&c->nodes[i].disk);
        free(c->nodes[i].stream);
        free(c->nodes[i].stage);
        if (c->nodes[i].meta_dir[0] != '\0') {
            test_rm_tree(c->nodes[i].meta_dir);
        }
    }
}

void cluster_step(struct cluster *c)
{
    if (xport_mem_net_complete(c->net) > 0) {
        return;
    }
    if (xport_mem_net_deliver(c->net, 0, 0, 1) > 0) {
        return;
    }
    for (unsigned k = 0; k < c->n; k++) {
        struct cnode *nd = &c->nodes[(c->rr + k) % c->n];
        if (!nd->up) {
            continue;
        }
        if (fake_io_flush(nd->io) > 0) {
            return;
        }
        if (repl_io_run_deferred(nd->repl) > 0) {
            return; /* memory durability: deferred append acks */
        }
        if (!nd->frozen && fake_io_complete(nd->io, 1) > 0) {
            c->rr = (c->rr + k + 1) % c->n;
            return;
        }
    }
    c->clock++;
    for (unsigned k = 0; k < c->n; k++) {
        if (c->nodes[k].up && !c->nodes[k].no_ticks) {
            fake_io_maybe_tick(c->nodes[k].io);
        }
    }
}

bool cluster_step_until(struct cluster *c,
                        cluster_pred pred,
                        void *arg,
                        unsigned max_steps)
{
    for (unsigned s = 0; s < max_steps; s++) {
        if (pred(c, arg)) {
            return true;
        }
        cluster_step(c);
    }
    return pred(c, arg);
}

int cluster_writable_leader(struct cluster *c)
{
    for (unsigned k = 0; k < c->n; k++) {
        if (c->nodes[k].up && c->nodes[k].role == REPL_LEADER &&
            c->nodes[k].writable) {
            return (int)k;
        }
    }
    return -1;
}

int cluster_leader(struct cluster *c)
{
    for (unsigned k = 0; k < c->n; k++) {
        if (c->nodes[k].up && c->nodes[k].role == REPL_LEADER) {
            return (int)k;
        }
    }
    return -1;
}

int cluster_propose(struct cluster *c,
                    unsigned i,
                    const void *payload,
                    size_t len,
                    uint64_t *index)
{
    size_t padded = (len + 7) & ~(size_t)7; /* repl_propose: multiple of 8 */
    void *buf = tern_calloc(1, padded);
    int rv;
    memcpy(buf, payload, len);
    rv = repl_propose(c->nodes[i].repl, buf, padded, NULL, NULL, index);
    if (rv != 0) {
        tern_free(buf);
    }
    return rv;
}

void cluster_link(struct cluster *c, unsigned i, unsigned j, bool up)
{
    xport_mem_net_set_link(c->net, c->nodes[i].id, c->nodes[j].id, up);
    xport_mem_net_set_link(c->net, c->nodes[j].id, c->nodes[i].id, up);
}

void cluster_isolate(struct cluster *c, unsigned i, bool isolated)
{
    for (unsigned k = 0; k < c->n; k++) {
        if (k != i) {
            cluster_link(c, i, k, !isolated);
        }
    }
}

bool pred_writable_leader(struct cluster *c, void *arg)
{
    (void)arg;
    return cluster_writable_leader(c) >= 0;
}

bool pred_any_leader(struct cluster *c, void *arg)
{
    (void)arg;
    return cluster_leader(c) >= 0;
}

bool pred_all_applied(struct cluster *c, void *arg)
{
    uint64_t index = *(uint64_t *)arg;
    for (unsigned k = 0; k < c->n; k++) {
        struct repl_status st;
        if (!c->nodes[k].up) {
            continue;
        }
        repl_get_status(c->nodes[k].repl, &st);
        if (st.last_applied < index) {
            return false;
        }
    }
    return true;
}

bool pred_leader_committed(struct cluster *c, void *arg)
{
    struct repl_status st;
    int l = cluster_leader(c);
    if (l < 0) {
        return false;
    }
    repl_get_status(c->nodes[l].repl, &st);
    return st.commit_index >= *(uint64_t *)arg;
}

/* ---- helpers for the topic test files ------------------------------------ */

void cluster_start_all(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        cluster_start(c, i);
    }
}

int cluster_elect(struct cluster *c)
{
    cluster_start_all(c);
    cr_assert(cluster_step_until(c, pred_writable_leader, NULL, CLUSTER_STEPS));
    return cluster_writable_leader(c);
}

void cluster_steps(struct cluster *c, unsigned n)
{
    for (unsigned s = 0; s < n; s++) {
        cluster_step(c);
    }
}

int cluster_other(struct cluster *c, int a, int b)
{
    for (unsigned k = 0; k < c->n; k++) {
        if ((int)k != a && (int)k != b) {
            return (int)k;
        }
    }
    return -1;
}

void cluster_propose_n(struct cluster *c,
                       unsigned l,
                       unsigned n,
                       size_t size,
                       uint64_t tag,
                       uint64_t *last)
{
    uint8_t buf[1024];
    cr_assert(size >= 16 && size <= sizeof buf);
    for (unsigned k = 0; k < n; k++) {
        memset(buf, (int)(k & 0xff), size);
        tern_put_u64(buf, tag);
        tern_put_u64(buf + 8, k);
        cr_assert_eq(cluster_propose(c, l, buf, size, last), 0);
    }
}

void cluster_propose_applied(struct cluster *c,
                             unsigned l,
                             unsigned n,
                             size_t size,
                             uint64_t tag,
                             uint64_t *last)
{
    cluster_propose_n(c, l, n, size, tag, last);
    cr_assert(cluster_step_until(c, pred_all_applied, last, CLUSTER_STEPS));
}

void cluster_freeze_all(struct cluster *c, bool frozen)
{
    for (unsigned i = 0; i < c->n; i++) {
        c->nodes[i].frozen = frozen;
    }
}
