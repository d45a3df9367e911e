/* libFuzzer target: the command entry decoder (index/cmd.c). Every input
 * goes through idx_cmd_validate; an accepted entry is decoded and rebuilt
 * with the idx_cmd_* builder, which must reproduce it byte for byte (the
 * format has one encoding per entry, so anything else is a decoder bug).
 * idx__entry_newer reads every input too, and never calls an accepted
 * entry a later release's; idx__entry_produce_msgs (the fetch's walk,
 * read.c) never names a message list outside the input.
 * Build with -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION so that checksums
 * do not stop mutated inputs (see IDX__CHECKSUM_OK). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"

/* A command without a name (READ_BARRIER, TERM, an anonymous PRODUCER_INIT) has
 * n == 0. */
static void copy_name(char *dst, const char *src, uint8_t n)
{
    if (n > 0) {
        memcpy(dst, src, n);
    }
    dst[n] = '\0';
}

/* libFuzzer's entry point, named by libFuzzer.
 * NOLINTNEXTLINE(readability-identifier-naming) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct idx__entry it;
    struct idx__cmd c;
    struct tern_wbuf w;
    char q[TERN_NAME_MAX + 1], g[TERN_NAME_MAX + 1];
    char ns[TERN_NAME_MAX + 1], pat[256];
    int rc = idx_cmd_validate(data, size);
    bool newer = idx__entry_newer(data, size);
    for (size_t at = 0; at < size; at += 1 + size / 8) {
        size_t start = 0, end = 0;
        bool with_props;
        struct idx__entry_scan scan = {0};
        if (idx__entry_produce_msgs(data, size, at, &scan, &start, &end,
                                    &with_props) == 1 &&
            !(start <= end && end <= size && at < end)) {
            abort(); /* a message list outside the entry */
        }
    }
    if (rc != 0) {
        if (rc != TERN_EMALFORMED && rc != TERN_EVERSION) {
            abort();
        }
        return 0;
    }
    if (newer) {
        abort(); /* an entry this build applies is no later release's */
    }
    if (idx__entry_open(&it, data, size) != 0) {
        abort();
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, it.timestamp_ms);
    /* The builder sets the XXH3 flag; an accepted entry may be without it
     * (an earlier release's): rebuild with the input's flags. */
    tern_put_u16(w.base + 2, tern_get_u16(data + 2));
    while ((rc = idx__entry_next(&it, &c)) == 1) {
        copy_name(q, c.queue, c.queue_len);
        if (c.type == IDX_CMD_PRODUCE || c.type == IDX_CMD_PRODUCE_PROPS) {
            /* The walk's lookup finds exactly the decoded message list. */
            struct idx__entry_scan sc = {0};
            size_t at = (size_t)(c.msgs - data), s0 = 0, e0 = 0;
            bool wp = false;
            if (idx__entry_produce_msgs(data, size, at, &sc, &s0, &e0, &wp) !=
                    1 ||
                s0 != at || e0 != at + c.msgs_len ||
                wp != (c.type == IDX_CMD_PRODUCE_PROPS)) {
                abort();
            }
        }
        switch (c.type) {
        case IDX_CMD_QUEUE_CREATE:
            idx_cmd_queue_create_opts(&w, q,
                                      c.has_settings ? &c.settings : NULL);
            break;
        case IDX_CMD_QUEUE_UPDATE:
            idx_cmd_queue_update(&w, q, c.mask, &c.settings);
            break;
        case IDX_CMD_TRIM:
            idx_cmd_trim(&w, q, c.trim.queue_id, c.trim.from, c.trim.to,
                         c.trim.bytes);
            break;
        case IDX_CMD_QUEUE_DELETE:
            idx_cmd_queue_delete(&w, q);
            break;
        case IDX_CMD_GROUP_COMMIT:
            copy_name(g, c.group, c.group_len);
            idx_cmd_group_commit(&w, q, g, c.next_offset);
            break;
        case IDX_CMD_READ_BARRIER:
            idx_cmd_read_barrier(&w);
            break;
        case IDX_CMD_TERM:
            idx_cmd_term(&w, c.term);
            break;
        case IDX_CMD_PRODUCE: {
            struct idx__msg_iter mi;
            struct idx_msg *m = malloc(sizeof *m * c.n_msgs);
            const uint8_t *d;
            uint32_t len, k = 0;
            if (m == NULL) {
                abort();
            }
            idx__msg_iter_init(&mi, &c);
            while (idx__msg_iter_next(&mi, &d, &len) == 1) {
                if (k >= c.n_msgs || d < data || d + len > data + size) {
                    abort();
                }
                m[k].data = d;
                m[k].len = len;
                k++;
            }
            if (k != c.n_msgs) {
                abort();
            }
            idx_cmd_produce(&w, q, c.producer_id, c.seq, m, c.n_msgs);
            free(m);
            break;
        }
        case IDX_CMD_PRODUCE_PROPS:
        case IDX_CMD_PRODUCE_DELAYED: {
            struct idx__msg_iter mi;
            struct idx_pmsg *m = malloc(sizeof *m * c.n_msgs);
            const uint8_t *d;
            uint32_t len, k = 0;
            if (m == NULL) {
                abort();
            }
            idx__msg_iter_init(&mi, &c);
            while (idx__msg_iter_next(&mi, &d, &len) == 1) {
                if (k >= c.n_msgs || d < data || d + len > data + size ||
                    (mi.props_len > 0 &&
                     idx_props_check(mi.props, mi.props_len, NULL) != 0)) {
                    abort();
                }
                m[k].data = d;
                m[k].len = len;
                m[k].props = mi.props;
                m[k].props_len = mi.props_len;
                k++;
            }
            if (k != c.n_msgs) {
                abort();
            }
            if (c.type == IDX_CMD_PRODUCE_DELAYED) {
                idx_cmd_produce_delayed(&w, q, c.due_ms, c.producer_id, c.seq,
                                        m, c.n_msgs);
            } else {
                idx_cmd_produce_props(&w, q, c.producer_id, c.seq, m, c.n_msgs);
            }
            free(m);
            break;
        }
        case IDX_CMD_TIMER_FIRE: {
            struct idx__fire_iter fi;
            struct idx__fire_key fk;
            uint32_t k = 0;
            size_t at = idx_cmd_timer_fire_begin(&w);
            idx__fire_iter_init(&fi, &c);
            while (idx__fire_iter_next(&fi, &fk) == 1) {
                struct idx__msg_iter mi;
                struct idx_pmsg m;
                const uint8_t *d;
                idx__msg_iter_init_fire(&mi, &fk);
                if (idx__msg_iter_next(&mi, &d, &m.len) != 1 || d < data ||
                    d + m.len > data + size) {
                    abort();
                }
                m.data = d;
                m.props = mi.props;
                m.props_len = mi.props_len;
                copy_name(q, fk.queue, fk.queue_len);
                idx_cmd_timer_fire_add(&w, at, &fk.key, q, &m);
                k++;
            }
            if (k != c.n_msgs) {
                abort();
            }
            idx_cmd_timer_fire_end(&w, at);
            break;
        }
        case IDX_CMD_USER_SET:
            idx_cmd_user_set(&w, q, c.flags, c.cred, c.cred_len);
            break;
        case IDX_CMD_USER_DELETE:
            idx_cmd_user_delete(&w, q);
            break;
        case IDX_CMD_ACL_SET:
        case IDX_CMD_ACL_DELETE:
            copy_name(ns, c.ns, c.ns_len);
            copy_name(pat, c.pattern, c.pattern_len);
            if (c.type == IDX_CMD_ACL_SET) {
                idx_cmd_acl_set(&w, q, ns, pat, c.flags);
            } else {
                idx_cmd_acl_delete(&w, q, ns, pat);
            }
            break;
        case IDX_CMD_NAMESPACE_SET:
            idx_cmd_namespace_set(&w, q, &c.quota);
            break;
        case IDX_CMD_NAMESPACE_DELETE:
            idx_cmd_namespace_delete(&w, q);
            break;
        case IDX_CMD_PRODUCER_INIT:
            idx_cmd_producer_init(&w, q);
            break;
        case IDX_CMD_SHARED_CONFIG:
            copy_name(g, c.group, c.group_len);
            idx_cmd_shared_config(&w, q, g, c.mask, &c.shared);
            break;
        case IDX_CMD_DELIVER:
        case IDX_CMD_SETTLE: {
            static struct idx_deliver_item di[IDX_SHARED_LIST_MAX];
            static struct idx_settle_item si[IDX_SHARED_LIST_MAX];
            copy_name(g, c.group, c.group_len);
            for (uint32_t i = 0; i < c.n_items; i++) {
                if (c.type == IDX_CMD_DELIVER) {
                    idx__cmd_deliver_item(&c, i, &di[i]);
                } else {
                    idx__cmd_settle_item(&c, i, &si[i]);
                }
            }
            if (c.type == IDX_CMD_DELIVER) {
                idx_cmd_deliver(&w, q, g, c.consumer_id, di, c.n_items);
            } else {
                idx_cmd_settle(&w, q, g, si, c.n_items);
            }
            break;
        }
        case IDX_CMD_DEAD_LETTER: {
            /* The carried block already has the dead-letter headers; the
             * builder rebuilds the same block from it. */
            struct idx__msg_iter mi;
            struct idx_pmsg m;
            const uint8_t *d;
            char reason[IDX_SHARED_REASON_MAX + 1];
            copy_name(g, c.group, c.group_len);
            copy_name(reason, c.reason, c.reason_len);
            idx__msg_iter_init(&mi, &c);
            if (idx__msg_iter_next(&mi, &d, &m.len) != 1) {
                abort();
            }
            m.data = d;
            m.props = mi.props;
            m.props_len = mi.props_len;
            idx_cmd_dead_letter(&w, q, g, c.dl.offset, c.dl.count, reason, &m);
            break;
        }
        default:
            abort();
        }
    }
    /* Bytes [20,24) are the checksum, which fuzz builds do not check. */
    if (rc != 0 || idx_cmd_end(&w) != 0 || w.len != size ||
        memcmp(w.base, data, 20) != 0 ||
        memcmp(w.base + 24, data + 24, size - 24) != 0) {
        abort();
    }
    tern_wbuf_free(&w);
    return 0;
}
