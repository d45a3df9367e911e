/*
 * The software version of every member for `tern cluster status`. The
 * answering server puts its own version in its STATUS answer (the tail's
 * server_version, proto/include/proto.h); the other members' versions come
 * from asking each of them for its own STATUS at its client address, all
 * at once (one thread and one client per member), each bounded by
 * CLI_PROBE_TIMEOUT_MS, best effort: a member that is down, slow or
 * answers as another node shows as unknown. docs/ARCHITECTURE.md
 * (decision log) says why the CLI asks rather than the leader knowing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* One member's probe: its own client and the answer's version. */
struct probe
{
    uint64_t id;           /* the member asked */
    struct tern_client *c; /* owned; NULL when there is nothing to ask */
    pthread_t thread;
    int started;
    char *out; /* borrowed: the caller's out[i] */
};

static void *probe_run(void *arg)
{
    struct probe *p = arg;
    struct tern_status *s;
    if (tern_cluster_status(p->c, NULL, &s) != 0) {
        return NULL;
    }
    /* Only the member itself: another node at that address (a stale
     * configuration) does not speak for it. */
    if (tern_status_node_id(s) == p->id) {
        (void)snprintf(p->out, CLI_VERSION_MAX, "%s", tern_status_version(s));
    }
    tern_status_free(s);
    return NULL;
}

void cli_member_versions(const struct tern_status *s,
                         char (*out)[CLI_VERSION_MAX])
{
    size_t n = tern_status_member_count(s);
    struct probe *p;
    if (n == 0) {
        return;
    }
    p = calloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        out[i][0] = '\0';
        if (tern_status_member_id(s, i) == tern_status_node_id(s)) {
            (void)snprintf(out[i], CLI_VERSION_MAX, "%s",
                           tern_status_version(s));
        } else if (p != NULL &&
                   tern_status_member_client_address(s, i)[0] != '\0') {
            /* Clients are made here, on one thread; each thread then only
             * drives its own. A client that cannot be made leaves "". */
            p[i].id = tern_status_member_id(s, i);
            p[i].out = out[i];
            if (cli_client_probe_new(tern_status_member_client_address(s, i),
                                     CLI_PROBE_TIMEOUT_MS, &p[i].c) != 0) {
                p[i].c = NULL;
            }
        }
    }
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i].c != NULL) {
            p[i].started =
                pthread_create(&p[i].thread, NULL, probe_run, &p[i]) == 0;
            if (!p[i].started) {
                (void)probe_run(&p[i]); /* no thread: ask in turn */
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i].started) {
            (void)pthread_join(p[i].thread, NULL);
        }
        if (p[i].c != NULL) {
            tern_client_free(p[i].c);
        }
    }
    free(p);
}
