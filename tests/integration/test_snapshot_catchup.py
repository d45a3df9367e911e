#!/usr/bin/env python3
"""(c) a stopped node that fell behind by more than the retained raft log
catches up through a snapshot: small snapshot_threshold_bytes (64 KiB) and
snapshot_trailing (16), node 3 stopped, ~3 MiB produced, node 3 restarted;
once its last_applied reaches the leader's, node 3 alone serves every
acknowledged id."""
import glob
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N_BEFORE = 100
N = 3000  # x 1 KiB = ~3 MiB


def main(c):
    raft = {"snapshot_threshold_bytes": 65536, "snapshot_trailing": 16}
    with h.Cluster(3, raft=raft) as cl:
        c.step("start 3 nodes (snapshot every 64 KiB, trailing 16)")
        leader = cl.start()
        cl.tern("queue", "create", "snap", check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", "snap", "--count", N_BEFORE, "--size", 1024,
                    "--ack-log", acks, "--id-prefix", "a")
        c.check(r.returncode == 0, "produce %d before the stop" % N_BEFORE,
                r.stderr.strip()[-300:])

        lagger = 3
        c.step("stop node %d (SIGTERM)" % lagger)
        rc = cl.stop(lagger)
        c.check(rc == 0, "node %d exited 0 on SIGTERM" % lagger, rc)
        if leader == lagger:
            leader = cl.wait_leader(20, exclude=(lagger,))
        acks2 = os.path.join(cl.dir, "acks2.txt")
        c.step("produce %d x 1 KiB while node %d is down" % (N, lagger))
        r = cl.tern("produce", "snap", "--count", N, "--size", 1024,
                    "--ack-log", acks2, "--id-prefix", "b", timeout=150)
        c.check(r.returncode == 0, "produce %d exit 0" % N,
                r.stderr.strip()[-300:])
        acked = h.read_ack_log(acks) + h.read_ack_log(acks2)
        c.check(len(acked) == N_BEFORE + N, "%d acknowledged" %
                (N_BEFORE + N), len(acked))
        leader = cl.wait_leader(20)
        snaps = glob.glob(os.path.join(cl.nodes[leader].data_dir, "**",
                                       "snapshot-*"), recursive=True)
        c.info("leader node %d holds %d snapshot files" %
               (leader, len(snaps)))

        c.step("restart node %d and wait for it to catch up" % lagger)
        cl.start_node(lagger)
        st = cl.status(leader)
        target = (st or {}).get("last_applied") or 0
        c.check(target > 0, "leader last_applied known (%d)" % target)
        c.check(cl.wait_applied(lagger, target, 90),
                "node %d last_applied reaches %d" % (lagger, target),
                cl.status(lagger))
        log = cl.nodes[lagger].log_text().lower()
        c.info("node %d log mentions a snapshot install: %s" %
               (lagger, "snapshot" in log))

        c.step("consume from node %d alone" % lagger)
        got = cl.consume_all("snap", servers=cl.nodes[lagger].client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "node %d" % lagger, got, acked)
        c.check(cl.nodes[lagger].alive(), "node %d still running" % lagger)


if __name__ == "__main__":
    h.run_test(main)
