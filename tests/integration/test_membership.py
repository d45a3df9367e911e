#!/usr/bin/env python3
"""Online membership changes (docs/MEMBERSHIP.md) with real ternd
processes, under a produce load that runs from start to end:

- a node whose [peers] do not list it (join mode) logs that it is not in
  the cluster configuration and `tern cluster status` says so;
- grow 3 -> 4 -> 5 with `tern cluster add`: each new node starts with an
  empty data dir, catches up (snapshot + bulk copy, then entries) and
  becomes a voter; while an add waits for a node that is not running yet,
  a second change is refused with TERN_ECHANGING;
- the new nodes serve every acknowledged message, alone;
- shrink 5 -> 3 with `tern cluster remove`, the leader among the removed
  (it steps down, the others elect a leader); the removed nodes say they
  are not in the configuration;
- replace a killed node with a wiped one under a new id (remove the old
  id, add the new one) and read everything from the new node alone;
- no acknowledged message is lost: every id of every ack log is read back
  at its offset, without duplicates."""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

ABSENT_LINE = "not in the cluster configuration; waiting to be added"
BATCH = 300         # messages per producer run
MAX_BATCHES = 200   # bound of the background load


def set_peers(cl, nd, ids):
    """Rewrite node nd's [peers] to list only ids (the harness lists every
    node of the Cluster)."""
    with open(nd.config) as f:
        text = f.read()
    head = text.split("[peers]")[0]
    lines = ["%d = %s,%s" % (i, cl.nodes[i].raft_addr,
                             cl.nodes[i].client_addr) for i in ids]
    with open(nd.config, "w") as f:
        f.write(head + "[peers]\n" + "\n".join(lines) + "\n")


class Load:
    """Producer runs of BATCH messages in a loop (bounded by MAX_BATCHES
    and stop()), each with its own ack log, against the given servers."""

    def __init__(self, cl, servers):
        self.cl = cl
        self.servers = servers
        self.stop_ev = threading.Event()
        self.logs = []
        self.failures = []
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        for k in range(MAX_BATCHES):
            if self.stop_ev.is_set():
                break
            log = os.path.join(self.cl.dir, "acks-%03d.txt" % k)
            self.logs.append(log)
            r = self.cl.tern("produce", "q", "--count", BATCH, "--size", 64,
                             "--ack-log", log, "--id-prefix", "b%03d-" % k,
                             servers=self.servers(), timeout=120)
            if r.returncode != 0:
                self.failures.append(r.stderr.strip()[-300:])
                time.sleep(0.2)

    def start(self):
        self.t.start()

    def stop(self):
        self.stop_ev.set()
        self.t.join(timeout=180)

    def acked(self):
        out = []
        for log in self.logs:
            out += h.read_ack_log(log)
        return out


def status_json(cl, i):
    r = cl.tern("cluster", "status", "--json",
                servers=cl.nodes[i].client_addr, timeout=10,
                timeout_ms=3000)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def member_roles(cl, i):
    js = status_json(cl, i)
    if js is None:
        return None
    return {m["id"]: m.get("role") for m in js["members"]}


def wait_roles(cl, i, want, timeout=30):
    return h.poll(lambda: member_roles(cl, i) == want, timeout,
                  interval=0.2) is not None


def add(cl, nid, servers, wait_ms=None):
    nd = cl.nodes[nid]
    args = ["cluster", "add", nid, nd.raft_addr, nd.client_addr]
    if wait_ms is not None:
        args += ["--wait-ms", wait_ms]
    return cl.tern(*args, servers=servers, timeout=150)


def readyz(port):
    """(status, body) of GET /readyz on the [metrics] port."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port,
                                    timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def main(c):
    # Snapshots every 64 KiB with 16 trailing entries: a new node is past
    # the log's start and catches up by snapshot + bulk copy.
    raft = {"snapshot_threshold_bytes": 65536, "snapshot_trailing": 16}
    with h.Cluster(6, raft=raft) as cl:
        members = [1, 2, 3]

        def servers():
            return cl.servers([i for i in members if cl.nodes[i].alive()])

        for i in cl.nodes:
            set_peers(cl, cl.nodes[i], [1, 2, 3])
        mport = h.free_ports(1)[0]
        with open(cl.nodes[4].config, "a") as f:
            f.write("\n[metrics]\nlisten = 127.0.0.1:%d\n" % mport)
        c.step("start nodes 1-3 (peers 1-3), node 4 in join mode")
        for i in (1, 2, 3, 4):
            cl.start_node(i)
        leader = cl.wait_leader(20, exclude=(4, 5, 6))
        cl.tern("queue", "create", "q", servers=servers(), check=True)

        ok = h.poll(lambda: ABSENT_LINE in cl.nodes[4].log_text(), 10)
        c.check(ok, "node 4 logs '%s'" % ABSENT_LINE,
                cl.nodes[4].log_text()[-500:])
        js = status_json(cl, 4)
        c.check(js is not None and js.get("member_role") == "absent",
                "cluster status of node 4: member_role absent",
                js)
        r = cl.tern("cluster", "status", servers=cl.nodes[4].client_addr,
                    timeout=10, timeout_ms=3000)
        c.check("not in the cluster configuration" in r.stdout,
                "text status of node 4 says it is not in the configuration",
                r.stdout[-400:])
        st, body = readyz(mport)
        c.check(st == 503 and "not a voter of the configuration: absent"
                in body, "node 4's /readyz: 503, not a voter (absent)",
                (st, body))
        c.check(member_roles(cl, leader) == {1: "voter", 2: "voter",
                                             3: "voter"},
                "leader's configuration: voters 1-3",
                member_roles(cl, leader))

        c.step("produce load in the background")
        load = Load(cl, servers)
        load.start()
        h.poll(lambda: len(load.acked()) >= 4 * BATCH, 60)

        c.step("grow 3 -> 4: tern cluster add 4")
        t0 = time.monotonic()
        r = add(cl, 4, servers())
        c.check(r.returncode == 0 and "added: voter" in r.stdout,
                "cluster add 4 answers once node 4 is a voter (%.1f s)" %
                (time.monotonic() - t0),
                "rc=%d %s %s" % (r.returncode, r.stdout, r.stderr))
        members.append(4)
        c.check("restored snapshot" in cl.nodes[4].log_text(),
                "node 4 caught up through a snapshot install")
        c.check(wait_roles(cl, 4, {1: "voter", 2: "voter", 3: "voter",
                                   4: "voter"}),
                "node 4 knows the configuration 1-4, all voters",
                member_roles(cl, 4))
        c.check(h.poll(lambda: (status_json(cl, 4) or {}).get(
            "member_role") == "voter", 10) is not None,
            "node 4's own role: voter")
        c.check(h.poll(lambda: readyz(mport)[0] == 200, 10) is not None,
                "node 4's /readyz: 200 once a voter", readyz(mport))

        c.step("grow 4 -> 5: add node 5 before it runs; a second change "
               "meanwhile is refused")
        nd5 = cl.nodes[5]
        bg = cl.tern_popen("cluster", "add", 5, nd5.raft_addr,
                           nd5.client_addr, "--wait-ms", 60000,
                           servers=servers())
        lid = cl.wait_leader(20, exclude=(5, 6))
        ok = h.poll(lambda: (member_roles(cl, lid) or {}).get(5) in
                    ("spare", "standby"), 20, interval=0.1)
        c.check(ok, "node 5 is in the configuration as a non-voter while "
                "it is not running", member_roles(cl, lid))
        r = add(cl, 6, servers())
        c.check(r.returncode != 0 and ("TERN_ECHANGING" in r.stderr or
                                       "in progress" in r.stderr),
                "a concurrent add is refused (TERN_ECHANGING)",
                "rc=%d %s" % (r.returncode, r.stderr.strip()))
        r = cl.tern("cluster", "remove", 2, servers=servers(), timeout=60)
        c.check(r.returncode != 0 and ("TERN_ECHANGING" in r.stderr or
                                       "in progress" in r.stderr),
                "a concurrent remove is refused (TERN_ECHANGING)",
                "rc=%d %s" % (r.returncode, r.stderr.strip()))
        cl.start_node(5)
        try:
            out, err = bg.communicate(timeout=120)
        except Exception:  # noqa: BLE001 - bounded, then reaped
            bg.kill()
            out, err = bg.communicate()
        c.check(bg.returncode == 0 and "added: voter" in out,
                "cluster add 5 completes once node 5 runs",
                "rc=%s %s %s" % (bg.returncode, out, err.strip()))
        members.append(5)
        five = {i: "voter" for i in (1, 2, 3, 4, 5)}
        c.check(wait_roles(cl, 1, five), "configuration 1-5, all voters",
                member_roles(cl, 1))

        c.step("new nodes serve every message acknowledged so far, alone")
        acked = load.acked()
        lid = cl.wait_leader(20)
        target = (cl.status(lid) or {}).get("last_applied") or 0
        for i in (4, 5):
            c.check(cl.wait_applied(i, target, 60),
                    "node %d applied up to %d" % (i, target))
            got = cl.consume_all("q", servers=cl.nodes[i].client_addr,
                                 expect=len(acked))
            h.check_acked_readable(c, "node %d alone" % i, got, acked)

        c.step("shrink 5 -> 3: remove node 5, then the leader")
        r = cl.tern("cluster", "remove", 5, servers=servers(), timeout=60)
        c.check(r.returncode == 0, "cluster remove 5",
                "rc=%d %s" % (r.returncode, r.stderr.strip()))
        members.remove(5)
        lid = cl.wait_leader(20, exclude=(5, 6))
        r = cl.tern("cluster", "remove", lid, servers=servers(), timeout=60)
        c.check(r.returncode == 0, "cluster remove %d (the leader)" % lid,
                "rc=%d %s" % (r.returncode, r.stderr.strip()))
        members.remove(lid)
        new_lid = cl.wait_leader(20, exclude=(5, 6, lid))
        c.info("new leader: node %d" % new_lid)
        three = {i: "voter" for i in members}
        c.check(wait_roles(cl, new_lid, three),
                "configuration %s, all voters" % members,
                member_roles(cl, new_lid))
        # The removed leader applied its own removal; a removed follower
        # never receives the entry that removes it (the leader stops
        # replicating to it at once): it only stops hearing from a leader.
        ok = h.poll(lambda: ABSENT_LINE in cl.nodes[lid].log_text(), 15)
        c.check(ok, "removed leader %d logs that it is not in the "
                "configuration" % lid)
        for i in (5, lid):
            cl.stop(i)

        c.step("replace a killed node with a wiped one under a new id")
        victim = [i for i in members if i != new_lid][0]
        cl.kill(victim)
        c.info("killed node %d" % victim)
        r = cl.tern("cluster", "remove", victim, servers=servers(),
                    timeout=60)
        c.check(r.returncode == 0, "cluster remove %d (dead)" % victim,
                "rc=%d %s" % (r.returncode, r.stderr.strip()))
        members.remove(victim)
        n0 = len(load.acked())
        h.poll(lambda: len(load.acked()) >= n0 + 2 * BATCH, 60)
        cl.start_node(6)
        t0 = time.monotonic()
        r = add(cl, 6, servers())
        c.check(r.returncode == 0 and "added: voter" in r.stdout,
                "cluster add 6 (wiped node, new id) (%.1f s)" %
                (time.monotonic() - t0),
                "rc=%d %s %s" % (r.returncode, r.stdout, r.stderr))
        members.append(6)
        c.check("restored snapshot" in cl.nodes[6].log_text(),
                "node 6 caught up through a snapshot install")
        three = {i: "voter" for i in members}
        lid = cl.wait_leader(20, exclude=(5, victim, lid))
        c.check(wait_roles(cl, lid, three),
                "configuration %s, all voters" % sorted(members),
                member_roles(cl, lid))

        c.step("stop the load, read everything back")
        load.stop()
        acked = load.acked()
        c.info("%d messages acknowledged in %d producer runs, %d failed "
               "runs" % (len(acked), len(load.logs), len(load.failures)))
        for f in load.failures[:3]:
            c.info("failed run: %s" % f)
        c.check(len(acked) >= 2 * BATCH, "the load ran throughout",
                len(acked))
        target = (cl.status(lid) or {}).get("last_applied") or 0
        for i in members:
            c.check(cl.wait_applied(i, target, 60),
                    "node %d applied up to %d" % (i, target))
            got = cl.consume_all("q", servers=cl.nodes[i].client_addr,
                                 expect=len(acked))
            h.check_acked_readable(c, "node %d alone" % i, got, acked)


if __name__ == "__main__":
    h.run_test(main)
