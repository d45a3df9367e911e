/*
 * tests/unit/raft/test_member.c: membership changes (raft/member.c) on the
 * deterministic cluster harness: a node started in join mode is added
 * (spare -> standby -> caught up -> voter) and applies every entry; a
 * second change while one waits for its member is refused
 * (TERN_ECHANGING); an add that cannot finish times out at the role it
 * reached; removing the leader hands the cluster to the others; removing
 * a stranger or the only voter is refused; a wiped node back under its
 * old id in join mode never votes until it is removed and added again,
 * and the leader removes and adds back by itself a voter that answers
 * with less than it acknowledged (a wiped node restarted in or out of
 * join mode).
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

static struct cluster cl;

struct change_result
{
    bool done;
    int status;
    int reached;
};

static void change_cb(void *data, int status, int reached)
{
    struct change_result *r = data;
    cr_expect(!r->done, "change callback fired twice");
    r->done = true;
    r->status = status;
    r->reached = reached;
}

static bool pred_done(struct cluster *c, void *arg)
{
    (void)c;
    return ((struct change_result *)arg)->done;
}

static int role_in(struct repl *r, uint64_t id, char *meta, size_t cap)
{
    struct repl_member m[REPL_MEMBERS_MAX];
    unsigned n = 0;
    repl_members(r, m, REPL_MEMBERS_MAX, &n);
    for (unsigned i = 0; i < n && i < REPL_MEMBERS_MAX; i++) {
        if (m[i].id == id) {
            if (meta != NULL) {
                (void)snprintf(meta, cap, "%s", m[i].meta);
            }
            return m[i].role;
        }
    }
    return REPL_MEMBER_ABSENT;
}

/* Start the boot nodes [0, n_boot) and wait for a writable leader. */
static int start_boot(unsigned n, unsigned n_boot)
{
    cluster_init(&cl, n);
    cl.n_boot = n_boot;
    for (unsigned i = 0; i < n_boot; i++) {
        cluster_start(&cl, i);
    }
    cr_assert(
        cluster_step_until(&cl, pred_writable_leader, NULL, CLUSTER_STEPS));
    return cluster_writable_leader(&cl);
}

Test(member, join_node_added_as_voter_applies_everything)
{
    struct change_result res = {0};
    char meta[REPL_MEMBER_META_MAX + 1];
    uint64_t last = 0;
    int l = start_boot(4, 3);
    cluster_propose_applied(&cl, (unsigned)l, 40, 64, 1, &last);
    cluster_start(&cl, 3);
    cluster_steps(&cl, 200);
    cr_expect_eq(repl_self_role(cl.nodes[3].repl), REPL_MEMBER_ABSENT,
                 "a joining node is not in any configuration yet");
    cr_assert_eq(repl_member_add(cl.nodes[l].repl, 4, cl.nodes[3].addr,
                                 "127.0.0.1:7404", 0, change_cb, &res),
                 0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0, "%s", tern_strerror(res.status));
    cr_expect_eq(res.reached, REPL_MEMBER_VOTER);
    cr_expect_eq(role_in(cl.nodes[l].repl, 4, meta, sizeof meta),
                 REPL_MEMBER_VOTER);
    cr_expect_str_eq(meta, "127.0.0.1:7404");
    cluster_propose_applied(&cl, (unsigned)l, 10, 64, 2, &last);
    cr_expect_eq(cl.nodes[3].applied_index, last);
    cr_expect_eq(repl_self_role(cl.nodes[3].repl), REPL_MEMBER_VOTER);
    cluster_fini(&cl);
}

Test(member, second_change_refused_while_one_waits)
{
    struct change_result res = {0};
    struct change_result other = {0};
    uint64_t last = 0;
    int l = start_boot(5, 3);
    cluster_propose_applied(&cl, (unsigned)l, 10, 64, 1, &last);
    /* Node 4 is not running: the add stops at standby, catching up. */
    cr_assert_eq(repl_member_add(cl.nodes[l].repl, 4, cl.nodes[3].addr, NULL, 0,
                                 change_cb, &res),
                 0);
    cluster_steps(&cl, 2000);
    cr_expect(!res.done);
    cr_expect_eq(role_in(cl.nodes[l].repl, 4, NULL, 0), REPL_MEMBER_STANDBY);
    cr_expect_eq(repl_member_add(cl.nodes[l].repl, 5, cl.nodes[4].addr, NULL, 0,
                                 change_cb, &other),
                 TERN_ECHANGING);
    cr_expect_eq(repl_member_remove(cl.nodes[l].repl, 2, change_cb, &other),
                 TERN_ECHANGING);
    cr_expect(!other.done);
    /* The node comes up: the add completes. */
    cluster_start(&cl, 3);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0, "%s", tern_strerror(res.status));
    cr_expect_eq(role_in(cl.nodes[l].repl, 4, NULL, 0), REPL_MEMBER_VOTER);
    cluster_fini(&cl);
}

Test(member, add_times_out_at_the_role_reached)
{
    struct change_result res = {0};
    int l = start_boot(4, 3);
    cr_assert_eq(repl_member_add(cl.nodes[l].repl, 4, cl.nodes[3].addr, NULL,
                                 500, change_cb, &res),
                 0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, TERN_ETIMEDOUT, "%s", tern_strerror(res.status));
    cr_expect_eq(res.reached, REPL_MEMBER_STANDBY);
    /* Taken out again, and not a voter meanwhile: the leader still
     * commits with the three voters. */
    res.done = false;
    cr_assert_eq(repl_member_remove(cl.nodes[l].repl, 4, change_cb, &res), 0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0);
    cr_expect_eq(role_in(cl.nodes[l].repl, 4, NULL, 0), REPL_MEMBER_ABSENT);
    cluster_fini(&cl);
}

static bool pred_other_leader(struct cluster *c, void *arg)
{
    int old = *(int *)arg;
    int l = cluster_writable_leader(c);
    return l >= 0 && l != old;
}

Test(member, remove_leader_and_refusals)
{
    struct change_result res = {0};
    uint64_t last = 0;
    int l = start_boot(3, 3);
    int nl;
    cluster_propose_applied(&cl, (unsigned)l, 10, 64, 1, &last);
    cr_expect_eq(repl_member_remove(cl.nodes[l].repl, 9, change_cb, &res),
                 TERN_ENOTMEMBER);
    cr_expect_eq(repl_member_add(cl.nodes[l].repl, 2, cl.nodes[1].addr, NULL, 0,
                                 change_cb, &res),
                 TERN_EINVAL, "an id that is already a voter");
    cr_expect_eq(repl_member_add(cl.nodes[l].repl, 7, cl.nodes[1].addr, NULL, 0,
                                 change_cb, &res),
                 TERN_EINVAL, "another member's address");
    cr_expect_eq(repl_member_add(cl.nodes[l].repl, 7, "127.0.0.1:9100", "a,b",
                                 0, change_cb, &res),
                 TERN_EINVAL, "a ',' in the meta");
    {
        int f = cluster_other(&cl, l, l);
        cr_expect_eq(repl_member_remove(cl.nodes[f].repl, 1, change_cb, &res),
                     TERN_ENOTLEADER);
    }
    cr_assert_eq(
        repl_member_remove(cl.nodes[l].repl, cl.nodes[l].id, change_cb, &res),
        0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0, "%s", tern_strerror(res.status));
    cr_expect_eq(res.reached, REPL_MEMBER_ABSENT);
    cr_expect_eq(repl_self_role(cl.nodes[l].repl), REPL_MEMBER_ABSENT);
    cr_assert(cluster_step_until(&cl, pred_other_leader, &l, CLUSTER_STEPS));
    nl = cluster_writable_leader(&cl);
    cr_expect_eq(role_in(cl.nodes[nl].repl, cl.nodes[l].id, NULL, 0),
                 REPL_MEMBER_ABSENT);
    cluster_propose_n(&cl, (unsigned)nl, 5, 64, 2, &last);
    cr_assert(
        cluster_step_until(&cl, pred_leader_committed, &last, CLUSTER_STEPS),
        "two voters left commit");
    cluster_fini(&cl);
}

Test(member, the_only_voter_is_not_removed)
{
    struct change_result res = {0};
    int l = start_boot(1, 1);
    cr_expect_eq(repl_member_remove(cl.nodes[l].repl, 1, change_cb, &res),
                 TERN_ELASTVOTER);
    cr_expect(!res.done);
    cluster_fini(&cl);
}

static bool pred_rejoin_needed(struct cluster *c, void *arg)
{
    struct repl_status st;
    unsigned f = *(unsigned *)arg;
    if (!c->nodes[f].up) {
        return false;
    }
    repl_get_status(c->nodes[f].repl, &st);
    return st.rejoin_needed;
}

static bool pred_self_voter(struct cluster *c, void *arg)
{
    unsigned f = *(unsigned *)arg;
    return c->nodes[f].up &&
           repl_self_role(c->nodes[f].repl) == REPL_MEMBER_VOTER;
}

Test(member, wiped_node_never_votes_until_rejoined)
{
    struct change_result res = {0};
    struct repl_status st;
    uint64_t last = 0;
    int l = start_boot(3, 3);
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    struct cnode *nf = &cl.nodes[f];
    cluster_propose_applied(&cl, (unsigned)l, 30, 64, 1, &last);
    /* The operator's path: the leader's automatic rejoin is off. */
    for (unsigned i = 0; i < 3; i++) {
        cl.nodes[i].repl->member.auto_rejoin = false;
    }
    cl.no_auto_rejoin = true;

    /* Node f loses everything and comes back under its id, joining. */
    cluster_crash(&cl, f);
    fake_disk_close(&nf->disk);
    fake_disk_init(&nf->disk);
    nf->stream_len = 0;
    nf->applied_index = 0;
    nf->join = true;
    cluster_start(&cl, f);
    cr_assert(cluster_step_until(&cl, pred_rejoin_needed, &f, CLUSTER_STEPS),
              "the wiped node learns it is still counted as a voter");

    /* Without the leader, the other voter cannot win: f withholds its
     * vote (it may have acknowledged entries it no longer has). */
    cluster_crash(&cl, (unsigned)l);
    cluster_steps(&cl, 30000);
    cr_expect_lt(cluster_leader(&cl), 0, "no leader with a wiped voter");
    repl_get_status(nf->repl, &st);
    cr_expect_gt(st.votes_withheld, 0);

    /* The old leader returns; remove f and add it again. */
    cluster_start(&cl, (unsigned)l);
    cr_assert(
        cluster_step_until(&cl, pred_writable_leader, NULL, CLUSTER_STEPS));
    l = cluster_writable_leader(&cl);
    /* No tick of f falls between the add's steps (a slow loop, a burst
     * of entries): the wait must end from the configuration entries
     * themselves, or f would never vote again. */
    nf->no_ticks = true;
    cr_assert_eq(repl_member_remove(cl.nodes[l].repl, nf->id, change_cb, &res),
                 0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0, "%s", tern_strerror(res.status));
    res.done = false;
    cr_assert_eq(repl_member_add(cl.nodes[l].repl, nf->id, nf->addr, NULL, 0,
                                 change_cb, &res),
                 0);
    cr_assert(cluster_step_until(&cl, pred_done, &res, CLUSTER_STEPS));
    cr_expect_eq(res.status, 0, "%s", tern_strerror(res.status));
    cr_assert(cluster_step_until(&cl, pred_self_voter, &f, CLUSTER_STEPS),
              "the re-added node learns it is a voter");
    cr_expect(!nf->repl->member.rejoin_wait,
              "the wait ended without a tick between the add's steps");
    nf->no_ticks = false;
    repl_get_status(nf->repl, &st);
    cr_expect(!st.rejoin_needed);

    /* f votes again: without the leader (g or the first one: either may
     * have won after the return), f and the other elect one, which needs
     * f's vote or f itself. */
    cluster_propose_applied(&cl, (unsigned)l, 5, 64, 2, &last);
    cr_expect_eq(nf->applied_index, last);
    cluster_crash(&cl, (unsigned)l);
    cr_assert(
        cluster_step_until(&cl, pred_writable_leader, NULL, CLUSTER_STEPS));
    {
        int w = cluster_writable_leader(&cl);
        cr_expect_neq(w, l);
        cr_expect(w == (int)f || nf->repl->raft.voted_for == cl.nodes[w].id,
                  "f stood or voted for the winner");
    }
    cluster_fini(&cl);
}

static bool pred_auto_rejoined(struct cluster *c, void *arg)
{
    unsigned f = *(unsigned *)arg;
    int l = cluster_writable_leader(c);
    struct repl_status st;
    if (l < 0 || !c->nodes[f].up) {
        return false;
    }
    repl_get_status(c->nodes[l].repl, &st);
    return st.auto_rejoins > 0 && c->nodes[l].repl->member.change == NULL &&
           repl_self_role(c->nodes[f].repl) == REPL_MEMBER_VOTER;
}

static void wipe_and_restart(unsigned f, bool join)
{
    struct cnode *nf = &cl.nodes[f];
    cluster_crash(&cl, f);
    fake_disk_close(&nf->disk);
    fake_disk_init(&nf->disk);
    nf->stream_len = 0;
    nf->applied_index = 0;
    nf->join = join;
    cluster_start(&cl, f);
}

static void auto_rejoin(bool join)
{
    struct repl_status st;
    uint64_t last = 0;
    int l = start_boot(3, 3);
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    cluster_propose_applied(&cl, (unsigned)l, 30, 64, 1, &last);
    wipe_and_restart(f, join);
    cr_assert(cluster_step_until(&cl, pred_auto_rejoined, &f, CLUSTER_STEPS),
              "the leader removes and adds back the wiped voter");
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_eq(st.auto_rejoins, 1);
    cr_expect_eq(st.auto_rejoin_id, cl.nodes[f].id);
    cluster_propose_applied(&cl, (unsigned)l, 5, 64, 2, &last);
    cr_expect_eq(cl.nodes[f].applied_index, last);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect(!st.rejoin_needed);
    cluster_fini(&cl);
}

Test(member, leader_rejoins_a_wiped_voter_by_itself)
{
    auto_rejoin(false);
}

Test(member, leader_rejoins_a_wiped_joining_voter_by_itself)
{
    auto_rejoin(true);
}

Test(member, no_auto_rejoin_in_memory_durability)
{
    struct repl_status st;
    uint64_t last = 0;
    int l;
    unsigned f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    cluster_start_all(&cl);
    cr_assert(
        cluster_step_until(&cl, pred_writable_leader, NULL, CLUSTER_STEPS));
    l = cluster_writable_leader(&cl);
    f = (unsigned)cluster_other(&cl, l, l);
    cluster_propose_applied(&cl, (unsigned)l, 30, 64, 1, &last);
    wipe_and_restart(f, false);
    cluster_propose_applied(&cl, (unsigned)l, 5, 64, 2, &last);
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_eq(st.auto_rejoins, 0, "memory mode loses entries by design");
    cluster_fini(&cl);
}

/* The decoder of libraft's configuration entries (member.c) against
 * libraft's own encoder; a cut or foreign buffer is refused. */
Test(member, conf_role_reads_libraft_encoding)
{
    struct raft_configuration c;
    struct raft_buffer b;
    int role = -1;
    raft_configuration_init(&c);
    cr_assert_eq(raft_configuration_add(&c, 1, "10.0.0.1:7501", RAFT_VOTER), 0);
    cr_assert_eq(raft_configuration_add(&c, 7, "10.0.0.7:7501,10.0.0.7:7601",
                                        RAFT_SPARE),
                 0);
    cr_assert_eq(raft_configuration_add(&c, 3, "", RAFT_STANDBY), 0);
    cr_assert_eq(raft_configuration_encode(&c, &b), 0);
    cr_expect_eq(repl_member_conf_role(b.base, b.len, 1, &role), 0);
    cr_expect_eq(role, RAFT_VOTER);
    cr_expect_eq(repl_member_conf_role(b.base, b.len, 7, &role), 0);
    cr_expect_eq(role, RAFT_SPARE);
    cr_expect_eq(repl_member_conf_role(b.base, b.len, 3, &role), 0);
    cr_expect_eq(role, RAFT_STANDBY);
    cr_expect_eq(repl_member_conf_role(b.base, b.len, 9, &role), 1);
    /* Every cut inside the servers is malformed (padding may follow). */
    for (size_t n = 0; n < 9 + 8 + 14 + 1; n++) {
        cr_expect_eq(repl_member_conf_role(b.base, n, 1, &role),
                     TERN_EMALFORMED, "cut at %zu", n);
    }
    ((uint8_t *)b.base)[0] = 2;
    cr_expect_eq(repl_member_conf_role(b.base, b.len, 1, &role),
                 TERN_EMALFORMED);
    raft_free(b.base);
    raft_configuration_close(&c);
}
