#!/usr/bin/env python3
"""(d) idempotent retry does not duplicate: the leader is killed in the
middle of a pipelined produce (window 32, batch 8); the client retries the
in-flight batches against the new leader with the same producer id and
sequence numbers. The consumer must see each acknowledged id exactly once
(duplicates counted and reported)."""
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 30000  # large enough that the kill lands mid-stream even when fast
KILL_AFTER = 2000


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "idem", check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        c.step("pipelined produce (window 32, batch 8); kill -9 leader "
               "node %d after %d acks" % (leader, KILL_AFTER))
        p = cl.tern_popen("produce", "idem", "--count", N, "--size", 256,
                          "--batch", 8, "--window", 32, "--ack-log", acks,
                          "--id-prefix", "d")
        h.poll(lambda: len(h.read_ack_log(acks)) >= KILL_AFTER or
               p.poll() is not None, 60, interval=0.01)
        c.check(p.poll() is None, "producer still running at the kill",
                "rc=%s" % p.poll())
        cl.kill(leader)
        c.info("killed at %d acks" % len(h.read_ack_log(acks)))
        try:
            _, err = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        c.check(p.returncode == 0, "producer exit 0",
                "rc=%s: %s" % (p.returncode, err.strip()[-500:]))
        acked = h.read_ack_log(acks)
        c.info("%d acknowledged of %d" % (len(acked), N))
        c.check(not h.duplicates([a[0] for a in acked]),
                "no id acknowledged twice")
        if p.returncode == 0:
            c.check(len(acked) == N, "exit 0 means all %d ids are in the "
                    "ack log" % N, len(acked))
        offs = [a[1] for a in acked if a[1] is not None]
        c.check(len(set(offs)) == len(offs),
                "no offset acknowledged for two ids")

        c.step("consume everything")
        cl.wait_leader(20, exclude=(leader,))
        survivors = [i for i in cl.nodes if i != leader]
        got = cl.consume_all("idem", servers=survivors, expect=len(acked))
        dups = h.check_acked_readable(c, "survivors", got, acked)
        c.info("duplicates: %d ids (%d extra copies)" %
               (len(dups), sum(dups.values()) - len(dups)))


if __name__ == "__main__":
    h.run_test(main)
