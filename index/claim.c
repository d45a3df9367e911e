/*
 * Single active consumer of stream groups (docs/WORKQUEUES.md, "Single
 * active consumer for stream groups"): CLAIM gives a stream group to one
 * consumer until a time of the leader's clock, GROUP_COMMIT_AS and
 * GROUP_COMMIT are refused while another consumer's claim is live, and
 * idx_claim_get lets the server refuse the fetches of the others. This
 * file owns DBI "claims":
 *
 *   key: as the groups key (keys.c): u64 BE queue id, group name (a
 *   queue's rows share the 8-byte queue id prefix: the cleaner deletes
 *   them with the queue's groups rows, and a checkpoint leaves them out
 *   while the queue has a "dead" mark, ckpt.c)
 *   value, 32 bytes (little-endian; encoded/decoded byte by byte, be
 *   careful when adapting):
 *     offset size  field
 *     0      4     version = 1
 *     4      4     reserved = 0
 *     8      8     holder (consumer id, the client's producer id; != 0)
 *     16     8     until_ms (leader clock: the claim is live while the
 *                  time of an entry, or of the serving node, is below it)
 *     24     8     generation (1 for the first holder, +1 each time the
 *                  holder changes; a renewal keeps it)
 *
 * Apply reads only the row and the entry's time t, both of which a
 * checkpoint holds, so a rebuild decides as the first apply did. A claim
 * never creates a group row, and a shared group refuses claims.
 */
#include "idx_int.h"

#define CLAIM__VAL_SIZE 32
#define CLAIM__VERSION  1

static void claim_encode(uint8_t *b, const struct idx_claim *c)
{
    tern_put_u32(b, CLAIM__VERSION);
    tern_put_u32(b + 4, 0);
    tern_put_u64(b + 8, c->holder);
    tern_put_u64(b + 16, c->until_ms);
    tern_put_u64(b + 24, c->generation);
}

static int claim_decode(const void *buf, size_t len, struct idx_claim *c)
{
    const uint8_t *b = buf;
    if (len != CLAIM__VAL_SIZE || tern_get_u32(b) != CLAIM__VERSION ||
        tern_get_u32(b + 4) != 0) {
        return TERN_ECORRUPT;
    }
    c->holder = tern_get_u64(b + 8);
    c->until_ms = tern_get_u64(b + 16);
    c->generation = tern_get_u64(b + 24);
    return c->holder != 0 ? 0 : TERN_ECORRUPT;
}

/* The row of key in txn: 0 with *c, 1 when there is none, or a code. */
static int claim_get(struct idx_env *e,
                     MDB_txn *txn,
                     const void *key,
                     size_t key_len,
                     struct idx_claim *c)
{
    MDB_val k = {key_len, (void *)(uintptr_t)key}, v;
    int rc = mdb_get(txn, e->dbi_claims, &k, &v);
    memset(c, 0, sizeof *c);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get claim");
    }
    if (claim_decode(v.mv_data, v.mv_size, c) != 0) {
        return IDX__CORRUPT(e, "claim value");
    }
    return 0;
}

int idx__claim_read(struct idx_env *e,
                    MDB_txn *txn,
                    const void *key,
                    size_t key_len,
                    struct idx_claim *c)
{
    return claim_get(e, txn, key, key_len, c);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int idx__claim_apply(struct idx_env *e,
                     const struct idx__queue_val *q,
                     uint64_t t,
                     const struct idx__cmd *c,
                     struct idx_result *r)
{
    uint8_t key[IDX__GROUP_KEY_MAX], val[CLAIM__VAL_SIZE];
    struct idx_claim cl;
    size_t kn = idx__group_key(key, q->id, c->group, c->group_len);
    int rc = idx__group_is_shared(e, key, kn);
    if (rc != 0) {
        r->status = TERN_EINVAL; /* a shared group has no single consumer */
        return rc < 0 ? rc : 0;
    }
    rc = claim_get(e, e->wtxn, key, kn, &cl);
    if (rc < 0) {
        return rc;
    }
    MDB_val k = {kn, key};
    if (c->flags == IDX_CLAIM_RELEASE) {
        if (rc == 1 || cl.holder != c->consumer_id) {
            r->claim = cl; /* someone else's, or none: nothing changes */
            return 0;
        }
        rc = mdb_del(e->wtxn, e->dbi_claims, &k, NULL);
        if (rc != 0) {
            return idx__mdb_err(e, rc, "delete claim");
        }
        r->count = 1;
        return 0;
    }
    if (rc == 0 && cl.holder != c->consumer_id && cl.until_ms > t) {
        r->status = TERN_ECLAIMED;
        r->claim = cl;
        return 0;
    }
    if (rc == 1 || cl.holder != c->consumer_id) {
        cl.generation++;
        cl.holder = c->consumer_id;
    }
    cl.until_ms = add_sat(t, c->lease_ms);
    claim_encode(val, &cl);
    MDB_val v = {sizeof val, val};
    rc = mdb_put(e->wtxn, e->dbi_claims, &k, &v, 0);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "put claim");
    }
    r->count = 1;
    r->claim = cl;
    return 0;
}

int idx__claim_commit_check(struct idx_env *e,
                            const void *key,
                            size_t key_len,
                            uint64_t consumer_id,
                            uint64_t t,
                            struct idx_result *r)
{
    struct idx_claim cl;
    int rc = claim_get(e, e->wtxn, key, key_len, &cl);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    if (cl.until_ms > t && (consumer_id == 0 || cl.holder != consumer_id)) {
        r->status = TERN_ECLAIMED;
        r->claim = cl;
        return 1;
    }
    return 0;
}

int idx_claim_get(struct idx_env *e,
                  const char *queue,
                  const char *group,
                  struct idx_claim *out)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    uint8_t key[IDX__GROUP_KEY_MAX];
    size_t qn = queue != NULL ? strnlen(queue, TERN_NAME_MAX + 1) : 0;
    size_t gn = group != NULL ? strnlen(group, TERN_NAME_MAX + 1) : 0;
    memset(out, 0, sizeof *out);
    if (!tern_qname_valid(queue, qn) || !tern_name_valid(group, gn)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid queue or group");
    }
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "begin read txn");
    }
    MDB_val k = {qn, (void *)(uintptr_t)queue}, v;
    rc = mdb_get(txn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOQUEUE, __LINE__, "no queue %s", queue);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get queue");
    } else if (idx__queue_val_decode(v.mv_data, v.mv_size, &q) != 0) {
        rc = IDX__CORRUPT(e, "queue value of %s", queue);
    } else {
        size_t kn = idx__group_key(key, q.id, group, gn);
        rc = claim_get(e, txn, key, kn, out);
        rc = rc < 0 ? rc : 0;
    }
    mdb_txn_abort(txn);
    return rc;
}
