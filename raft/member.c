/*
 * raft/member.c: membership changes over libraft 0.15 (repl.h,
 * "Membership"): adding a member in steps, removing one, the view of the
 * configuration for node/, and keeping r->peers (known senders, bulk
 * sources) in step with the configuration.
 *
 * Adding, happy path (one struct repl_member_change, r->member.change):
 *   SPARE    raft_add: the member is in the configuration, not replicated
 *            to; committed -> cb -> STANDBY is submitted from the next tick
 *   STANDBY  raft_assign(standby): the leader replicates to it (a new,
 *            empty node gets an InstallSnapshot: the bulk copy of bulk.c,
 *            then entries); committed -> CATCHUP
 *   CATCHUP  every tick: once the member's match index (libraft's
 *            leader_state.progress, public in 0.15) reaches the commit
 *            index of the moment STANDBY committed (the state the member
 *            had to fetch; under a steady write load the live commit
 *            index stays a little ahead of any follower), VOTER is
 *            submitted
 *   VOTER    raft_assign(voter): libraft runs its catch-up rounds for
 *            what is left (at most max_catch_up_rounds rounds, each
 *            shorter than an election timeout, else it gives up with
 *            RAFT_NOCONNECTION), then appends the configuration; committed
 *            -> the caller's cb(0, VOTER).
 * Each raft change callback only records the next step; the submission
 * happens on the next tick, outside libraft's applyChange.
 *
 * Failure modes: the leader loses its leadership or term (libraft fails
 * the pending change with RAFT_LEADERSHIPLOST; a step waiting on our side
 * sees the term move) -> TERN_ELEADERSHIPLOST with the role reached; a
 * promotion abandoned by libraft (RAFT_NOCONNECTION) goes back to CATCHUP
 * until the deadline; the deadline passes while no libraft change is
 * pending -> TERN_ETIMEDOUT (a pending libraft change cannot be withdrawn:
 * its own outcome is awaited); the replica closes -> TERN_ESHUTDOWN. The
 * member keeps the role it reached: an add of it again continues from
 * there, a remove takes it out.
 *
 * One change at a time. libraft refuses a change while a configuration is
 * uncommitted or a promotion is in catch-up (RAFT_CANTCHANGE, which
 * fail.c translates to TERN_ECHANGING); between our steps no libraft
 * change is pending, so r->member.change refuses the others.
 *
 * Votes (repl.h): RequestVotes (and pre-votes) reach the core only on a
 * node its configuration lists as a voter and that is not waiting to be
 * re-added after starting empty in join mode (rejoin_wait, set by
 * repl_start, cleared once the node sees itself as spare or standby).
 * Dropping a RequestVote is a lost message to Raft: always safe.
 *
 * Automatic rejoin (repl.h): guard.c reports a voter whose rejection
 * shows an empty log (last index 0, or 1: only a bootstrap entry) after
 * it acknowledged more to this leader in this term (with disk durability
 * an acknowledged entry is on its disk: only a lost disk or directory
 * empties it; a log that is merely shorter is no proof, 0.15 followers
 * acknowledge their whole log, a divergent tail included, which a
 * conflict truncates later: seen in a jepsen partition run before this
 * rule, a false positive); the next tick starts a change
 * of its own, REJOIN (raft_remove), then the add's steps from SPARE with
 * the member's address string as it was, and no caller callback.
 *
 * The rejoin marker: rejoin_wait is kept on disk as the file
 * DATA_DIR/rejoin-wait (raft_uv's directory; its presence is the record,
 * its one line "tern rejoin-wait v1" only names it). repl_start creates
 * it, file and directory fsynced, when a join-mode node starts with an
 * empty log (before any entry can reach it), and sets rejoin_wait
 * whenever the file exists; it is removed (directory fsynced) once the
 * node sees itself as spare or standby. Without it a node restarted
 * between its data loss and its re-add (a crash, a rolling restart, the
 * second start of rejoin_on_corrupt with join = false in the file) would
 * find a configuration that counts it as a voter in the entries it got
 * meanwhile and vote with a log that lacks what it once acknowledged. A
 * removal that is lost in a crash only leaves the node waiting (it logs
 * that it is still counted as a voter, and `tern cluster rejoin` ends
 * it): safe.
 *
 * libraft 0.15 caveat (membershipRollback): a follower that must drop an
 * uncommitted configuration entry (a new leader's log lacks it) decodes
 * the last committed configuration from its log; when that entry was
 * already compacted into a snapshot, 0.15 dereferences NULL. Keeping
 * changes short (one at a time, each committed before the next, a
 * writable leader whose post-election barrier is applied) keeps the
 * uncommitted window small; it is not closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "repl_int.h"

#define MEMBER__DEFAULT_TIMEOUT_MS 120000u

enum member_step {
    STEP_REJOIN = 0, /* automatic rejoin: remove, then the add's steps */
    STEP_SPARE = 1,
    STEP_STANDBY,
    STEP_CATCHUP,
    STEP_VOTER,
    STEP_REMOVE,
};

struct repl_member_change
{
    struct raft_change req;
    struct repl *r;
    enum member_step step;
    bool in_raft; /* req is pending in libraft */
    bool submit;  /* submit step on the next tick */
    uint64_t id;
    uint64_t term;     /* the leader's term at the start */
    uint64_t deadline; /* io time, ms */
    uint64_t target;   /* CATCHUP: the commit index when it began */
    char address[256]; /* "RAFTADDR[,META]" */
    repl_change_cb cb;
    void *data;
};

static struct repl_member_change *change_new(struct repl *r,
                                             uint64_t id,
                                             enum member_step step,
                                             unsigned timeout_ms,
                                             repl_change_cb cb,
                                             void *data);
static void start_rejoin(struct repl *r);

const char *repl_member_role_name(int role)
{
    switch (role) {
    case REPL_MEMBER_STANDBY:
        return "standby";
    case REPL_MEMBER_VOTER:
        return "voter";
    case REPL_MEMBER_SPARE:
        return "spare";
    case REPL_MEMBER_ABSENT:
        return "absent";
    default:
        return "?";
    }
}

void repl_member_raft_addr(const char *address, char *out, size_t cap)
{
    size_t n = strcspn(address, ",");
    if (cap == 0) {
        return;
    }
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(out, address, n);
    out[n] = '\0';
}

static const struct raft_server *conf_get(const struct repl *r, uint64_t id)
{
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        if (r->raft.configuration.servers[i].id == id) {
            return &r->raft.configuration.servers[i];
        }
    }
    return NULL;
}

static int role_of(const struct repl *r, uint64_t id)
{
    const struct raft_server *s = conf_get(r, id);
    return s != NULL ? s->role : REPL_MEMBER_ABSENT;
}

static uint64_t now_ms(struct repl *r)
{
    return r->raft.io->time(r->raft.io);
}

int repl_peers_sync(struct repl *r)
{
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        const struct raft_server *s = &r->raft.configuration.servers[i];
        struct repl_peer *np;
        struct repl_peer_ack *na;
        char addr[256];
        bool known = false;
        for (unsigned j = 0; j < r->n_peers; j++) {
            if (r->peers[j].id == s->id) {
                known = true;
                break;
            }
        }
        if (known) {
            continue;
        }
        repl_member_raft_addr(s->address, addr, sizeof addr);
        np = tern_realloc(r->peers, (r->n_peers + 1) * sizeof *np);
        if (np == NULL) {
            return -ENOMEM;
        }
        r->peers = np;
        na = tern_realloc(r->guard.peer_acks, (r->n_peers + 1) * sizeof *na);
        if (na == NULL) {
            return -ENOMEM;
        }
        r->guard.peer_acks = na;
        memset(&na[r->n_peers], 0, sizeof *na);
        np[r->n_peers].id = s->id;
        np[r->n_peers].address = tern_strdup(addr);
        if (np[r->n_peers].address == NULL) {
            return -ENOMEM;
        }
        r->n_peers++;
    }
    return 0;
}

void repl_members(struct repl *r,
                  struct repl_member *out,
                  unsigned cap,
                  unsigned *n)
{
    *n = r->raft.configuration.n;
    for (unsigned i = 0; i < r->raft.configuration.n && i < cap; i++) {
        const struct raft_server *s = &r->raft.configuration.servers[i];
        const char *comma = strchr(s->address, ',');
        out[i].id = s->id;
        out[i].role = s->role;
        repl_member_raft_addr(s->address, out[i].address,
                              sizeof out[i].address);
        (void)snprintf(out[i].meta, sizeof out[i].meta, "%s",
                       comma != NULL ? comma + 1 : "");
    }
}

int repl_self_role(struct repl *r)
{
    return role_of(r, r->id);
}

#define MEMBER__REJOIN_MARK "rejoin-wait"

static int mark_path(const struct repl *r, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/" MEMBER__REJOIN_MARK, r->data_dir);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int repl_member_rejoin_mark_load(struct repl *r, bool *present, char *errmsg)
{
    char path[4096];
    int rv;
    *present = false;
    if (r->data_dir == NULL) {
        return 0;
    }
    rv = mark_path(r, path, sizeof path);
    if (rv == 0 && access(path, F_OK) != 0) {
        rv = errno == ENOENT ? 0 : -errno;
        if (rv == 0) {
            return 0;
        }
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: %s/" MEMBER__REJOIN_MARK ": %s",
                           r->data_dir, strerror(-rv));
        return rv;
    }
    *present = true;
    return 0;
}

int repl_member_rejoin_mark_store(struct repl *r, char *errmsg)
{
    static const char line[] = "tern rejoin-wait v1\n";
    char path[4096];
    int fd = -1;
    int rv;
    if (r->data_dir == NULL) {
        return 0;
    }
    rv = mark_path(r, path, sizeof path);
    if (rv != 0) {
        goto out;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
        goto out;
    }
    if (write(fd, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) {
        rv = errno != 0 ? -errno : -EIO;
        goto out_close;
    }
    if (fsync(fd) != 0) {
        rv = -errno;
        goto out_close;
    }
    rv = repl_fsync_dir(r->data_dir);
out_close:
    close(fd);
out:
    if (rv != 0) {
        tern_errmsg_printf(errmsg,
                           "repl: create %s/" MEMBER__REJOIN_MARK ": %s",
                           r->data_dir, strerror(-rv));
    }
    return rv;
}

/* The wait ends: remove the marker. A failure is logged by the caller's
 * stats only (the node then keeps waiting after a restart: safe). */
static void rejoin_mark_remove(struct repl *r)
{
    char path[4096];
    if (r->data_dir == NULL || mark_path(r, path, sizeof path) != 0) {
        return;
    }
    if (unlink(path) == 0) {
        (void)repl_fsync_dir(r->data_dir);
    }
}

int repl_member_conf_role(const void *buf, size_t len, raft_id id, int *role)
{
    const uint8_t *p = buf;
    const uint8_t *end = p + len;
    uint64_t n = 0;
    int found = 1;

    if (len < 9 || p[0] != 1) {
        return TERN_EMALFORMED;
    }
    for (int i = 0; i < 8; i++) {
        n |= (uint64_t)p[1 + i] << (8 * i);
    }
    p += 9;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t sid = 0;
        const uint8_t *nul;
        if ((size_t)(end - p) < 8) {
            return TERN_EMALFORMED;
        }
        for (int i = 0; i < 8; i++) {
            sid |= (uint64_t)p[i] << (8 * i);
        }
        p += 8;
        nul = memchr(p, 0, (size_t)(end - p));
        if (nul == NULL || end - (nul + 1) < 1) {
            return TERN_EMALFORMED;
        }
        p = nul + 1;
        if (sid == id && found == 1) {
            *role = *p;
            found = 0;
        }
        p++;
    }
    return found;
}

void repl_member_conf_seen(struct repl *r, const struct raft_buffer *buf)
{
    int role = -1;
    if (!r->member.rejoin_wait ||
        repl_member_conf_role(buf->base, buf->len, r->id, &role) != 0) {
        return;
    }
    if (role == REPL_MEMBER_SPARE || role == REPL_MEMBER_STANDBY) {
        r->member.rejoin_wait = false; /* added back by the add path */
        rejoin_mark_remove(r);
    }
}

bool repl_member_may_vote(struct repl *r)
{
    int role = role_of(r, r->id);
    if (r->member.rejoin_wait &&
        (role == REPL_MEMBER_SPARE || role == REPL_MEMBER_STANDBY)) {
        r->member.rejoin_wait = false; /* added by the add path */
        rejoin_mark_remove(r);
    }
    return role == REPL_MEMBER_VOTER && !r->member.rejoin_wait;
}

/* ---- changes ------------------------------------------------------------ */

static void finish(struct repl_member_change *m, int status)
{
    struct repl *r = m->r;
    repl_change_cb cb = m->cb;
    void *data = m->data;
    int reached = role_of(r, m->id);
    r->member.change = NULL;
    tern_free(m);
    if (cb != NULL) {
        cb(data, status, reached);
    }
}

static void change_cb(struct raft_change *req, int status)
{
    struct repl_member_change *m = req->data;
    struct repl *r = m->r;
    m->in_raft = false;
    if (r->closing) {
        finish(m, TERN_ESHUTDOWN);
        return;
    }
    if (status != 0) {
        if (m->step == STEP_VOTER && status == RAFT_NOCONNECTION &&
            now_ms(r) < m->deadline) {
            m->step = STEP_CATCHUP; /* libraft gave the promotion up */
            return;
        }
        r->core_failing++; /* maybe inside a step-down (repl_int.h) */
        finish(m, repl_err_from_raft(status));
        r->core_failing--;
        return;
    }
    switch (m->step) {
    case STEP_REJOIN:
        m->step = STEP_SPARE; /* removed: add it back */
        m->submit = true;
        break;
    case STEP_SPARE:
        m->step = STEP_STANDBY;
        m->submit = true;
        break;
    case STEP_STANDBY:
        m->step = STEP_CATCHUP;
        m->target = r->raft.commit_index;
        break;
    case STEP_CATCHUP:
    case STEP_VOTER:
    case STEP_REMOVE:
        finish(m, 0);
        break;
    }
}

/* Hand m's step to libraft. 0, or a tern code (cb not called). */
static int submit(struct repl_member_change *m)
{
    struct repl *r = m->r;
    int rv;
    m->req.data = m;
    switch (m->step) {
    case STEP_SPARE:
        rv = raft_add(&r->raft, &m->req, m->id, m->address, change_cb);
        break;
    case STEP_STANDBY:
        rv = raft_assign(&r->raft, &m->req, m->id, RAFT_STANDBY, change_cb);
        break;
    case STEP_VOTER:
        rv = raft_assign(&r->raft, &m->req, m->id, RAFT_VOTER, change_cb);
        break;
    case STEP_REJOIN:
    case STEP_REMOVE:
        rv = raft_remove(&r->raft, &m->req, m->id, change_cb);
        break;
    default:
        return TERN_EINTERNAL;
    }
    if (rv != 0) {
        return repl_err_from_raft(rv);
    }
    m->in_raft = true;
    return 0;
}

void repl_member_tick(struct repl *r)
{
    struct repl_member_change *m = r->member.change;
    int rv;

    r->member.self_absent = conf_get(r, r->id) == NULL;
    (void)repl_member_may_vote(r); /* ends the rejoin wait when due */
    if (r->raft.configuration.n > 0) {
        (void)repl_peers_sync(r); /* retried on the next tick */
    }
    if (m == NULL && r->member.amnesia_id != 0 && !r->closing) {
        start_rejoin(r);
        return;
    }
    if (m == NULL || m->in_raft || r->closing) {
        return;
    }
    if (raft_state(&r->raft) != RAFT_LEADER ||
        r->raft.current_term != m->term) {
        finish(m, TERN_ELEADERSHIPLOST);
        return;
    }
    if (now_ms(r) >= m->deadline) {
        finish(m, TERN_ETIMEDOUT);
        return;
    }
    if (m->step == STEP_CATCHUP) {
        unsigned i;
        for (i = 0; i < r->raft.configuration.n; i++) {
            if (r->raft.configuration.servers[i].id == m->id) {
                break;
            }
        }
        if (i == r->raft.configuration.n) {
            finish(m, TERN_ENOTMEMBER);
            return;
        }
        if (r->raft.leader_state.progress == NULL ||
            r->raft.leader_state.progress[i].match_index < m->target) {
            return;
        }
        m->step = STEP_VOTER;
        m->submit = true;
    }
    if (m->submit) {
        m->submit = false;
        rv = submit(m);
        if (rv == TERN_ECHANGING) {
            m->submit = true; /* libraft still commits: next tick */
        } else if (rv != 0) {
            finish(m, rv);
        }
    }
}

void repl_member_amnesia(struct repl *r, uint64_t id)
{
    if (r->member.auto_rejoin && r->durability == REPL_DURABILITY_DISK &&
        id != r->id) {
        r->member.amnesia_id = id;
    }
}

/* Automatic rejoin of amnesia_id (repl.h), from the tick. */
static void start_rejoin(struct repl *r)
{
    const struct raft_server *s;
    struct repl_member_change *m;
    uint64_t id = r->member.amnesia_id;
    unsigned voters = 0;
    if (id == 0 || r->member.change != NULL ||
        raft_state(&r->raft) != RAFT_LEADER || !r->guard.writable ||
        r->raft.configuration_uncommitted_index != 0 ||
        r->raft.leader_state.promotee_id != 0) {
        return; /* kept: tried again on the next tick */
    }
    r->member.amnesia_id = 0;
    s = conf_get(r, id);
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        voters += r->raft.configuration.servers[i].role == RAFT_VOTER;
    }
    if (s == NULL || s->role != RAFT_VOTER || voters < 2) {
        return;
    }
    m = change_new(r, id, STEP_REJOIN, 0, NULL, NULL);
    if (m == NULL) {
        return;
    }
    (void)snprintf(m->address, sizeof m->address, "%s", s->address);
    if (submit(m) != 0) {
        tern_free(m);
        return;
    }
    r->member.change = m;
    r->member.auto_rejoins++;
    r->member.auto_rejoin_id = id;
}

void repl_member_close(struct repl *r)
{
    if (r->member.change != NULL) {
        finish(r->member.change, TERN_ESHUTDOWN);
    }
}

static int may_change(struct repl *r)
{
    if (r->closing) {
        return TERN_ESHUTDOWN;
    }
    if (r->core_failing > 0) {
        return TERN_ELEADERSHIPLOST; /* inside a step-down (repl_int.h) */
    }
    repl_poll(r);
    if (r->failed != 0 || raft_state(&r->raft) != RAFT_LEADER ||
        !r->guard.writable) {
        return TERN_ENOTLEADER;
    }
    if (r->member.change != NULL || r->raft.configuration_uncommitted_index ||
        r->raft.leader_state.promotee_id != 0) {
        return TERN_ECHANGING;
    }
    return 0;
}

static struct repl_member_change *change_new(struct repl *r,
                                             uint64_t id,
                                             enum member_step step,
                                             unsigned timeout_ms,
                                             repl_change_cb cb,
                                             void *data)
{
    struct repl_member_change *m = tern_calloc(1, sizeof *m);
    if (m == NULL) {
        return NULL;
    }
    m->r = r;
    m->id = id;
    m->step = step;
    m->term = r->raft.current_term;
    m->deadline =
        now_ms(r) + (timeout_ms != 0 ? timeout_ms : MEMBER__DEFAULT_TIMEOUT_MS);
    m->cb = cb;
    m->data = data;
    return m;
}

int repl_member_add(struct repl *r,
                    uint64_t id,
                    const char *address,
                    const char *meta,
                    unsigned timeout_ms,
                    repl_change_cb cb,
                    void *data)
{
    const struct raft_server *s;
    struct repl_member_change *m;
    enum member_step step = STEP_SPARE;
    char raft_addr[256];
    int rv = may_change(r);
    if (rv != 0) {
        return rv;
    }
    if (id == 0 || address == NULL || address[0] == '\0' ||
        strchr(address, ',') != NULL || strlen(address) > REPL_WIRE_ADDR_MAX ||
        (meta != NULL &&
         (strchr(meta, ',') != NULL || strlen(meta) > REPL_MEMBER_META_MAX)) ||
        strlen(address) + 1 + (meta != NULL ? strlen(meta) : 0) >= 256) {
        return TERN_EINVAL;
    }
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        const struct raft_server *o = &r->raft.configuration.servers[i];
        repl_member_raft_addr(o->address, raft_addr, sizeof raft_addr);
        if (o->id != id && strcmp(raft_addr, address) == 0) {
            return TERN_EINVAL; /* another member's address */
        }
    }
    s = conf_get(r, id);
    if (s != NULL) {
        repl_member_raft_addr(s->address, raft_addr, sizeof raft_addr);
        if (s->role == RAFT_VOTER || strcmp(raft_addr, address) != 0) {
            return TERN_EINVAL; /* already a voter, or another node's id */
        }
        step = s->role == RAFT_SPARE ? STEP_STANDBY : STEP_CATCHUP;
    }
    m = change_new(r, id, step, timeout_ms, cb, data);
    if (m == NULL) {
        return -ENOMEM;
    }
    if (meta != NULL && meta[0] != '\0') {
        (void)snprintf(m->address, sizeof m->address, "%s,%s", address, meta);
    } else {
        (void)snprintf(m->address, sizeof m->address, "%s", address);
    }
    m->target = r->raft.commit_index;
    if (step != STEP_CATCHUP) {
        rv = submit(m);
        if (rv != 0) {
            tern_free(m);
            return rv;
        }
    }
    r->member.change = m;
    return 0;
}

int repl_member_remove(struct repl *r,
                       uint64_t id,
                       repl_change_cb cb,
                       void *data)
{
    const struct raft_server *s;
    struct repl_member_change *m;
    unsigned voters = 0;
    int rv = may_change(r);
    if (rv != 0) {
        return rv;
    }
    s = conf_get(r, id);
    if (s == NULL) {
        return TERN_ENOTMEMBER;
    }
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        if (r->raft.configuration.servers[i].role == RAFT_VOTER) {
            voters++;
        }
    }
    if (s->role == RAFT_VOTER && voters <= 1) {
        return TERN_ELASTVOTER;
    }
    m = change_new(r, id, STEP_REMOVE, 0, cb, data);
    if (m == NULL) {
        return -ENOMEM;
    }
    rv = submit(m);
    if (rv != 0) {
        tern_free(m);
        return rv;
    }
    r->member.change = m;
    return 0;
}
