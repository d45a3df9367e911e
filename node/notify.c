/*
 * sd_notify(3) for ternd under systemd (dist/systemd/ternd.service is
 * Type=notify): READY=1 once raft has started and the client port
 * listens, STOPPING=1 when shutdown begins, STATUS= on raft role changes.
 * libsystemd's calls return at once without NOTIFY_SOCKET, so a node run
 * by hand or by the test harness pays nothing. A failed send is ignored:
 * the service manager's own timeout reports a node that never became
 * ready.
 */
#include <inttypes.h>

#include <systemd/sd-daemon.h>

#include "notify.h"

void node_notify_ready(const char *client_addr)
{
    (void)sd_notifyf(0, "READY=1\nSTATUS=serving clients on %s", client_addr);
}

void node_notify_stopping(void)
{
    (void)sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

void node_notify_role(const char *role, uint64_t term, int writable)
{
    (void)sd_notifyf(0, "STATUS=%s, term %" PRIu64 "%s", role, term,
                     writable ? ", writable" : "");
}
