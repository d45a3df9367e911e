/* A batcher (node/batch.c) wired to a real index in a temporary directory,
 * for the unit tests that drive the leader's planned entries (shared
 * groups, delayed messages) through propose, apply and flush. The test
 * keeps its own answers: it passes its respond callback to the setup. */
#ifndef TERN_TEST_BATCH_FIXTURE_H
#define TERN_TEST_BATCH_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "idx.h"

#define BATCH_FIXTURE_T0        1700000000000ull
#define BATCH_FIXTURE_MAX_PROPS 16

struct batch_fixture
{
    struct node_batcher b;
    struct node_batcher_ops ops;
    /* Proposals in order; buf is owned by the fixture (freed at teardown). */
    struct node_batch *batch[BATCH_FIXTURE_MAX_PROPS];
    void *buf[BATCH_FIXTURE_MAX_PROPS];
    size_t len[BATCH_FIXTURE_MAX_PROPS];
    uint64_t index[BATCH_FIXTURE_MAX_PROPS];
    unsigned n_props;
    uint64_t now; /* the leader's timestamp; starts at BATCH_FIXTURE_T0 */
    struct idx_env *e;
    char dir[64];
};

/* Zero f, open an index in a new /tmp/ternd-<name>-XXXXXX and init the
 * batcher with the fixture's propose and time and the caller's respond. */
void batch_fixture_setup(struct batch_fixture *f,
                         const char *name,
                         void (*respond)(struct node_wreq *w));
/* Free the proposals, close the index, remove the directory. */
void batch_fixture_teardown(struct batch_fixture *f);
/* Propose what is open, apply and flush every new proposal, answer. */
void batch_fixture_run(struct batch_fixture *f);

#endif
