#!/usr/bin/env python3
"""Leadership transfer (CLUSTER_TRANSFER, `tern cluster transfer`) on 3
nodes: to a given id (the answer names it, and it becomes the writable
leader), to any voter, to the leader itself (done at once), refused for an
unknown id (TERN_ENOTVOTER naming it), and refused by a follower on the
wire (TERN_ENOTLEADER with the leader hint, which libtern follows). Then
SIGTERM on the leader during a produce load: the leader hands over first
(its log says so) and exits 0, and the producer sees zero errors; every
acknowledged id reads back once."""
import os
import socket
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_util  # noqa: E402
import tern_harness as h  # noqa: E402

OP_CLUSTER_TRANSFER = 33
TERN_ENOTLEADER = -31001
TERN_ENOTVOTER = -31034


def raw_transfer(cl, node, to_id):
    """CLUSTER_TRANSFER sent to node alone: the answer frame."""
    with socket.create_connection(("127.0.0.1",
                                   cl.nodes[node].client_port), 5) as s:
        s.sendall(h.encode_frame(OP_CLUSTER_TRANSFER,
                                 struct.pack("<Q", to_id), request_id=5))
        return h.recv_frame(s, timeout=10)


def leader_of(out):
    """The id printed by `tern cluster transfer` ("leader: N")."""
    for ln in out.splitlines():
        if ln.startswith("leader: "):
            return int(ln.split()[1])
    return None


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)
        cl.tern("produce", "q", "--count", 50, check=True)

        c.step("transfer to a given follower")
        to = [i for i in sorted(cl.nodes) if i != leader][-1]
        r = ops_util.transfer(cl, to)
        c.check(r.returncode == 0 and leader_of(r.stdout) == to,
                "answer names node %d" % to, r.stdout + r.stderr)
        now = cl.wait_leader(10)
        c.check(now == to, "node %d is the writable leader" % to, now)
        r = cl.tern("produce", "q", "--count", 10)
        c.check(r.returncode == 0, "writes go on", r.stderr)

        c.step("transfer to any voter")
        r = ops_util.transfer(cl)
        got = leader_of(r.stdout)
        c.check(r.returncode == 0 and got not in (None, to),
                "another node leads (%s)" % got, r.stdout + r.stderr)
        now = cl.wait_leader(10)
        c.check(now == got, "node %s is the writable leader" % got, now)

        c.step("transfer to the leader itself: done at once")
        r = ops_util.transfer(cl, now)
        c.check(r.returncode == 0 and leader_of(r.stdout) == now,
                "answer names node %d" % now, r.stdout + r.stderr)

        c.step("refusals")
        r = ops_util.transfer(cl, 9)
        c.check(r.returncode != 0 and "no node 9" in r.stderr and
                "voter" in r.stderr,
                "unknown id 9 refused (TERN_ENOTVOTER)", r.stderr)
        follower = [i for i in sorted(cl.nodes) if i != now][0]
        f = raw_transfer(cl, follower, 0)
        c.check(f is not None and f.status == TERN_ENOTLEADER and
                f.op == (OP_CLUSTER_TRANSFER | 0x80),
                "follower %d answers TERN_ENOTLEADER" % follower, repr(f))
        hint = cl.nodes[now].client_addr.encode()
        c.check(f is not None and hint in f.body,
                "with the leader's address as hint", f and f.body)
        f = raw_transfer(cl, now, 9)
        c.check(f is not None and f.status == TERN_ENOTVOTER,
                "leader answers TERN_ENOTVOTER on the wire", repr(f))
        c.check(cl.wait_leader(10) == now, "leadership unchanged by refusals")

        c.step("SIGTERM on the leader under load")
        load = ops_util.ProduceLoad(cl, "q", prefix="t", max_s=60).start()
        c.check(load.wait_acks(600, 30), "load running", len(load.acked()))
        rc = cl.stop(now, timeout=15)
        c.check(rc == 0, "leader %d exits 0" % now, rc)
        log = cl.nodes[now].log_text()
        c.check("leadership handed over, stopping" in log,
                "its log says it handed over first",
                [ln for ln in log.splitlines() if "hand" in ln])
        n = len(load.acked())
        c.check(load.wait_acks(n + 600, 30), "acknowledgements go on")
        cl.start_node(now)
        c.check(ops_util.wait_caught_up(cl, now) is not None,
                "node %d back and caught up" % now)
        c.check(load.stop(), "load stopped")
        gap, _ = load.gap()
        acked = load.acked()
        print("  figure  SIGTERM on the leader: acked=%d client_errors=%d "
              "longest_write_gap_ms=%.0f" % (len(acked), len(load.errors),
                                             1000 * gap), flush=True)
        c.check(not load.errors, "zero client errors over %d rounds" %
                load.rounds, load.errors[:3])
        got = cl.consume_all("q", expect=len(acked) + 60, timeout=60)
        h.check_acked_readable(c, "all nodes", [g for g in got
                                                if g[1].startswith("t")],
                               acked)


if __name__ == "__main__":
    h.run_test(main)
