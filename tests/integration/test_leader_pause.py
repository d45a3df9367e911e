#!/usr/bin/env python3
"""SIGSTOP of the leader during a pipelined produce: `tern produce --count
N --window 8 --ack-log` runs while the leader is paused (its connections
stay up, nothing comes back). libtern abandons the silent leader after its
attempt timeout and resends the batches in flight to the others under the
same producer id and sequence; the new leader takes them. Afterwards
every acknowledged id must be readable at its acknowledged offset, on
every node once the old leader is resumed, and no id may appear twice.
The longest time without a new acknowledgement after the pause is printed
as info (a figure, not a judged one)."""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 6000
PAUSE_AFTER = 1000  # acknowledged messages before the pause
AFTER = 1000        # acknowledgements to see after the pause


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = os.path.join(cl.dir, "acks.txt")

        c.step("produce %d in the background (window 8), SIGSTOP the "
               "leader (node %d) after %d acks" % (N, leader, PAUSE_AFTER))
        p = cl.tern_popen("produce", "q", "--count", N, "--size", 256,
                          "--window", 8, "--ack-log", acks,
                          "--id-prefix", "p")
        ok = h.poll(lambda: len(h.read_ack_log(acks)) >= PAUSE_AFTER or
                    p.poll() is not None, 60, interval=0.01)
        n_before = len(h.read_ack_log(acks))
        c.check(ok and p.poll() is None,
                "producer still running with %d acks" % n_before,
                "producer exited early: rc=%s" % p.poll())
        cl.nodes[leader].proc.send_signal(signal.SIGSTOP)
        t_pause = time.monotonic()
        c.info("paused node %d at %d acks" % (leader, n_before))

        # Sample the ack log: the longest stretch without a new ack.
        last_n, last_t, gap = n_before, t_pause, 0.0
        deadline = t_pause + 60
        while time.monotonic() < deadline and p.poll() is None:
            n = len(h.read_ack_log(acks))
            now = time.monotonic()
            if n > last_n:
                gap = max(gap, now - last_t)
                last_n, last_t = n, now
            if n >= n_before + AFTER:
                break
            time.sleep(0.005)
        c.info("longest write gap after the pause: %.0f ms (sampled every "
               "5 ms)" % (1000 * gap))
        c.check(last_n > n_before, "acks continued while the old leader "
                "was paused", "%d -> %d" % (n_before, last_n))
        new_leader = cl.wait_leader(20, exclude=(leader,))
        c.info("new leader node %d" % new_leader)

        c.step("resume node %d, let the producer finish" % leader)
        cl.nodes[leader].proc.send_signal(signal.SIGCONT)
        acked = h.finish_producer(c, p, acks, N)

        c.step("read everything back from the new leader")
        got = cl.consume_all("q", servers=[new_leader], expect=len(acked))
        h.check_acked_readable(c, "new leader", got, acked)

        c.step("node %d catches up and returns the same sequence" % leader)
        h.check_same_sequence(c, cl, leader, new_leader, got, "resumed")


if __name__ == "__main__":
    h.run_test(main)
