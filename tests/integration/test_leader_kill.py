#!/usr/bin/env python3
"""(b) kill -9 of the leader during a produce loop: `tern produce --count
5000 --ack-log` runs while the leader is SIGKILLed. Afterwards every
acknowledged id must be readable (checked id by id, not by count) at its
acknowledged offset, and no id may appear twice (the idempotent producer
allows none); duplicates are reported. The killed node, restarted, must
serve the same sequence."""
import os
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
        acked = h.finish_producer(c, p, acks, N)
        c.check(len(acked) > n_before, "acks continued after the failover",
                len(acked))

        c.step("read everything back from the survivors")
        survivors = [i for i in cl.nodes if i != leader]
        got = cl.consume_all("q", servers=survivors, expect=len(acked))
        h.check_acked_readable(c, "survivors", got, acked)

        c.step("restart node %d, read from it alone" % leader)
        cl.start_node(leader)
        h.check_same_sequence(c, cl, leader, new_leader, got, "restarted")


if __name__ == "__main__":
    h.run_test(main)
