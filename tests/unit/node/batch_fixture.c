/* The batcher-plus-index fixture of batch_fixture.h. */
#include "batch_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

static int fixture_propose(void *arg,
                           struct node_batch *batch,
                           void *buf,
                           size_t len,
                           uint64_t *index)
{
    struct batch_fixture *f = arg;
    cr_assert_lt(f->n_props, TERN_ARRAY_SIZE(f->buf));
    cr_assert_eq(idx_cmd_validate(buf, idx_cmd_entry_len(buf, len)), 0);
    *index = 10 + f->n_props;
    f->batch[f->n_props] = batch;
    f->buf[f->n_props] = buf;
    f->len[f->n_props] = len;
    f->index[f->n_props] = *index;
    f->n_props++;
    return 0;
}

static uint64_t fixture_time(void *arg)
{
    const struct batch_fixture *f = arg;
    return f->now;
}

void batch_fixture_setup(struct batch_fixture *f,
                         const char *name,
                         void (*respond)(struct node_wreq *w))
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options o;
    memset(f, 0, sizeof(*f));
    f->now = BATCH_FIXTURE_T0;
    f->ops.propose = fixture_propose;
    f->ops.respond = respond;
    f->ops.timestamp_ms = fixture_time;
    node_batcher_init(&f->b, &f->ops, f);
    cr_assert_lt(
        (size_t)snprintf(f->dir, sizeof(f->dir), "/tmp/ternd-%s-XXXXXX", name),
        sizeof(f->dir));
    cr_assert_not_null(mkdtemp(f->dir));
    memset(&o, 0, sizeof(o));
    o.dir = f->dir;
    cr_assert_eq(idx_open(&o, &f->e, errmsg), 0, "%s", errmsg);
}

void batch_fixture_teardown(struct batch_fixture *f)
{
    char cmd[128];
    for (unsigned i = 0; i < f->n_props; i++) {
        tern_free(f->buf[i]);
    }
    idx_close(f->e);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir),
                 sizeof(cmd));
    cr_expect_eq(system(cmd), 0);
}

void batch_fixture_run(struct batch_fixture *f)
{
    unsigned first = f->n_props;
    node_batcher_propose(&f->b);
    for (unsigned i = first; i < f->n_props; i++) {
        struct idx_result res[16];
        unsigned nr = 0;
        cr_assert_eq(
            idx_apply(f->e, f->index[i], f->buf[i],
                      idx_cmd_entry_len(f->buf[i], f->len[i]), res, 16, &nr),
            0, "%s", idx_errmsg(f->e));
        node_batcher_on_apply(&f->b, f->index[i], f->buf[i], f->len[i], res,
                              nr);
        node_batcher_proposed(f->batch[i], 0, f->index[i]);
    }
    cr_assert_eq(idx_flush(f->e), 0);
    node_batcher_flushed(&f->b);
}
