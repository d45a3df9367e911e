/*
 * raft/seed.c: seed an empty raft directory with an initial snapshot, so
 * a new cluster starts from a backup's state (docs/OPERATIONS.md,
 * "Backup and restore"; node/restore.c).
 *
 * Why a snapshot: the commit log's records carry the raft indexes of the
 * cluster that wrote them, and applying is idempotent by raft index, so a
 * new cluster must continue after the backup's last applied index rather
 * than bootstrap at 1. The seed is exactly the state a follower has after
 * installing a snapshot: the store's snapshot at (index, term 1) with the
 * new cluster's voters as its configuration, term 1 and no vote, and no
 * entries. The store is the one the node will run (c->log_store): raft_uv
 * (its snapshot files and metadata, plus tern's term record, meta.c) or
 * tern's own (tlog_io.c: its snapshot file and term record, the only
 * copy), since a raft directory stays with the store that made it.
 * At start libraft loads it and calls the FSM's restore with the manifest
 * (the backup's snapshot manifest), whose commit log is either already
 * installed by index/ (idx_backup_install) or fetched from a peer by the
 * start-up restore (bulk.c). raft_bootstrap then finds state and does
 * nothing (repl_start ignores RAFT_CANTBOOTSTRAP).
 *
 * Every node of the new cluster is seeded with the same snapshot; their
 * logs then match at index, so any of them may win the first election,
 * and the next entries (term >= 2) follow the snapshot.
 *
 * Runs before the node starts, on a loop of its own (blocking).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <raft/uv.h>

#include "repl_int.h"
#include "tlog.h"

struct seed
{
    struct repl_null_transport t;
    struct raft_io uv_io; /* log_store uv */
    struct raft_io *io;   /* &uv_io, or tern's (repl_tlog_io_new) */
    uv_loop_t loop;
    bool put_done;
    int put_status;
    bool closed;
};

static void put_cb(struct raft_io_snapshot_put *req, int status)
{
    struct seed *s = req->data;
    s->put_done = true;
    s->put_status = status;
}

static void io_closed(struct raft_io *io)
{
    struct seed *s = io->data;
    s->closed = true;
}

int repl_seed_snapshot(const struct repl_config *c,
                       uint64_t index,
                       const void *manifest,
                       size_t len,
                       char *errmsg)
{
    struct seed *s;
    struct raft_snapshot snap;
    struct raft_io_snapshot_put req;
    struct raft_buffer buf;
    struct raft_snapshot *loaded = NULL;
    struct raft_entry *entries = NULL;
    struct repl_meta_rec rec;
    raft_term term = 0;
    raft_id vote = 0;
    raft_index start = 0;
    size_t n_entries = 0;
    int rv;

    if (c->data_dir == NULL || index == 0 || manifest == NULL || len == 0 ||
        c->n_peers == 0) {
        tern_errmsg_printf(errmsg, "repl: seed: bad arguments");
        return TERN_EINVAL;
    }
    if (mkdir(c->data_dir, 0700) != 0 && errno != EEXIST) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "repl: mkdir %s: %s", c->data_dir,
                           tern_strerror(rv));
        return rv;
    }
    repl_install_heap();
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        return -ENOMEM;
    }
    rv = uv_loop_init(&s->loop);
    if (rv != 0) {
        tern_free(s);
        tern_errmsg_printf(errmsg, "repl: seed: loop: %s", uv_strerror(rv));
        return rv;
    }
    repl_null_transport_init(&s->t, &s->loop);
    raft_configuration_init(&snap.configuration);
    if (c->log_store == REPL_LOG_STORE_TERN) {
        rv = repl_tlog_io_new(
            &s->loop, c->data_dir,
            c->segment_bytes ? c->segment_bytes : TLOG_DEFAULT_SEGMENT_BYTES, 0,
            &s->io, errmsg);
        if (rv != 0) {
            goto err_after_loop;
        }
    } else {
        rv = raft_uv_init(&s->uv_io, &s->loop, c->data_dir, &s->t.t);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "repl: raft_uv_init %s: %s", c->data_dir,
                               s->uv_io.errmsg);
            rv = repl_err_from_raft(rv);
            goto err_after_loop;
        }
        s->io = &s->uv_io;
    }
    s->io->data = s;
    rv = s->io->init(s->io, c->id, c->address);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: seed: init: %s", s->io->errmsg);
        rv = repl_err_from_raft(rv);
        goto err_after_uv;
    }
    rv =
        s->io->load(s->io, &term, &vote, &loaded, &start, &entries, &n_entries);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: seed: load: %s", s->io->errmsg);
        rv = repl_err_from_raft(rv);
        goto err_after_init;
    }
    if (term != 0 || loaded != NULL || n_entries != 0) {
        tern_errmsg_printf(errmsg,
                           "repl: seed: %s already holds raft state (term "
                           "%llu, %zu entries): restore into a new data "
                           "directory",
                           c->data_dir, (unsigned long long)term, n_entries);
        rv = TERN_EINVAL;
        goto err_after_load;
    }
    rv = s->io->set_term(s->io, 1);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: seed: set term: %s", s->io->errmsg);
        rv = repl_err_from_raft(rv);
        goto err_after_load;
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        rv = raft_configuration_add(&snap.configuration, c->peers[i].id,
                                    c->peers[i].address, RAFT_VOTER);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "repl: seed: configuration: %s",
                               raft_strerror(rv));
            rv = repl_err_from_raft(rv);
            goto err_after_load;
        }
    }
    buf.base = (void *)manifest;
    buf.len = len;
    snap.index = index;
    snap.term = 1;
    snap.configuration_index = index;
    snap.bufs = &buf;
    snap.n_bufs = 1;
    req.data = s;
    rv = s->io->snapshot_put(s->io, 0, &req, &snap, put_cb);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: seed: snapshot put: %s",
                           s->io->errmsg);
        rv = repl_err_from_raft(rv);
        goto err_after_load;
    }
    while (!s->put_done) {
        (void)uv_run(&s->loop, UV_RUN_ONCE);
    }
    if (s->put_status != 0) {
        tern_errmsg_printf(errmsg, "repl: seed: snapshot put: %s",
                           raft_strerror(s->put_status));
        rv = repl_err_from_raft(s->put_status);
        goto err_after_load;
    }
    if (c->log_store != REPL_LOG_STORE_TERN) {
        /* tlog_io's set_term wrote its term record, the only copy. */
        rec.present = true;
        rec.seq = 1;
        rec.term = 1;
        rec.vote = 0;
        rv = repl_meta_write(c->data_dir, &rec, errmsg);
    }
err_after_load:
    if (loaded != NULL) {
        raft_configuration_close(&loaded->configuration);
        for (unsigned i = 0; i < loaded->n_bufs; i++) {
            raft_free(loaded->bufs[i].base);
        }
        raft_free(loaded->bufs);
        raft_free(loaded);
    }
    if (entries != NULL) {
        for (size_t i = 0; i < n_entries; i++) {
            if (entries[i].batch != NULL) {
                raft_free(entries[i].batch);
                break;
            }
        }
        raft_free(entries);
    }
err_after_init:
    s->io->close(s->io, io_closed);
    while (!s->closed) {
        (void)uv_run(&s->loop, UV_RUN_ONCE);
    }
    (void)uv_run(&s->loop, UV_RUN_DEFAULT);
err_after_uv:
    if (s->io == &s->uv_io) {
        raft_uv_close(&s->uv_io);
    } else {
        repl_tlog_io_free(s->io);
    }
err_after_loop:
    raft_configuration_close(&snap.configuration);
    (void)uv_loop_close(&s->loop);
    tern_free(s);
    return rv;
}
