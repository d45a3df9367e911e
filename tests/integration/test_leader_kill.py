#!/usr/bin/env python3
"""(b) kill -9 of the leader during a produce loop: `tern produce --count
5000 --ack-log` runs while the leader is SIGKILLed. Afterwards every
acknowledged id must be readable (checked id by id, not by count) at its
acknowledged offset, and no id may appear twice (the idempotent producer
allows none); duplicates are reported. The killed node, restarted, must
serve the same sequence."""
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 5000
KILL_AFTER = 1000  # acknowledged messages before the kill


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = os.path.join(cl.dir, "acks.txt")

        c.step("produce %d in the background, kill -9 the leader (node %d) "
               "after %d acks" % (N, leader, KILL_AFTER))
        p = cl.tern_popen("produce", "q", "--count", N, "--size", 512,
                          "--ack-log", acks, "--id-prefix", "k")
        ok = h.poll(lambda: len(h.read_ack_log(acks)) >= KILL_AFTER or
                    p.poll() is not None, 60, interval=0.01)
        n_before = len(h.read_ack_log(acks))
        c.check(ok and p.poll() is None,
                "producer still running with %d acks" % n_before,
                "producer exited early: rc=%s" % p.poll())
        t_kill = time.monotonic()
        cl.kill(leader)
        c.info("killed node %d at %d acks" % (leader, n_before))
        new_leader = cl.wait_leader(20, exclude=(leader,))
        c.info("new leader node %d after %.0f ms" %
               (new_leader, 1000 * (time.monotonic() - t_kill)))
        try:
            out, err = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        c.check(p.returncode == 0, "producer exit 0 (all %d acknowledged)" %
                N, "rc=%s: %s" % (p.returncode, err.strip()[-500:]))

        acked = h.read_ack_log(acks)
        ack_ids = [a[0] for a in acked]
        c.info("%d acknowledged" % len(acked))
        c.check(len(acked) > n_before, "acks continued after the failover",
                len(acked))
        if p.returncode == 0:
            c.check(len(acked) == N, "exit 0 means all %d ids are in the "
                    "ack log" % N, len(acked))
        c.check(not h.duplicates(ack_ids), "no id acknowledged twice",
                h.duplicates(ack_ids))

        c.step("read everything back from the survivors")
        survivors = [i for i in cl.nodes if i != leader]
        got = cl.consume_all("q", servers=survivors, expect=len(acked))
        h.check_acked_readable(c, "survivors", got, acked)

        c.step("restart node %d, read from it alone" % leader)
        cl.start_node(leader)
        st = cl.status(new_leader)
        target = (st or {}).get("last_applied") or 0
        c.check(cl.wait_applied(leader, target, 60),
                "node %d applied up to %d" % (leader, target))
        got2 = cl.consume_all("q", servers=cl.nodes[leader].client_addr,
                              expect=len(got))
        c.check(got2 == got, "restarted node returns the same sequence",
                "%d vs %d messages" % (len(got2), len(got)))


if __name__ == "__main__":
    h.run_test(main)
