/*
 * tests/unit/raft: a fake in-memory disk for the repl io wrapper. A
 * struct fake_disk is the durable state of one node (term, vote, log,
 * snapshot) and survives "crashes"; a struct fake_io is one incarnation's
 * inner raft_io over it: appends, truncates and snapshot puts queue up in
 * submission order and become durable only when the test completes them;
 * the clock is the cluster's manual clock. Nothing here is thread-safe.
 */
#ifndef TERN_TEST_FAKE_IO_H
#define TERN_TEST_FAKE_IO_H

#include <stdbool.h>
#include <stdint.h>

#include <raft.h>

struct fake_entry
{
    uint64_t term;
    unsigned short type;
    void *buf;
    size_t len;
};

struct fake_disk
{
    uint64_t term;
    uint64_t vote;
    /* log: entries[i] has index start + i */
    uint64_t start;
    struct fake_entry *entries;
    size_t n;
    size_t cap;
    /* latest snapshot (index 0 = none) */
    uint64_t snap_index;
    uint64_t snap_term;
    struct raft_configuration snap_conf;
    uint64_t snap_conf_index;
    void *snap_data;
    size_t snap_len;
};

void fake_disk_init(struct fake_disk *d);
void fake_disk_close(struct fake_disk *d);
/* Entry at index, NULL if not in the durable log. */
const struct fake_entry *fake_disk_get(const struct fake_disk *d,
                                       uint64_t index);
uint64_t fake_disk_last_index(const struct fake_disk *d);

struct fake_op;

struct fake_io
{
    struct raft_io io; /* must be first */
    struct fake_disk *disk;
    const uint64_t *clock;
    uint64_t seed;
    uint64_t next_index;
    struct fake_op *ops_head, *ops_tail; /* appends/truncates/puts */
    struct fake_op *gets;                /* snapshot_get completions */
    raft_io_tick_cb tick;
    unsigned tick_ms;
    uint64_t next_tick;
    raft_io_close_cb close_cb;
    bool closing;
    bool closed;          /* close cb fired */
    bool frozen;          /* appends are not completed by fake_io_run */
    int fail_next_append; /* status to fail the next append with */
    int fail_next_submit; /* the next append call returns this */
    int fixed_random;     /* >= 0: random() returns min + this (capped) */
    /* Called at every append submission (first index, count), before it
     * is queued; NULL: none. */
    void (*on_append)(void *arg, uint64_t first, unsigned n);
    void *on_append_arg;
};

/* Initialise an inner io over disk with the cluster clock. */
void fake_io_init(struct fake_io *f,
                  struct fake_disk *disk,
                  const uint64_t *clock,
                  uint64_t seed);
/* Complete up to n queued disk operations in order (appends become
 * durable). Returns how many completed. */
size_t fake_io_complete(struct fake_io *f, size_t n);
size_t fake_io_pending(const struct fake_io *f);
/* Fire snapshot_get completions and the close callback if due. Returns the
 * number of callbacks fired. */
size_t fake_io_flush(struct fake_io *f);
/* Tick if due at the current clock. Returns 1 if it ticked. */
int fake_io_maybe_tick(struct fake_io *f);

#endif /* TERN_TEST_FAKE_IO_H */
