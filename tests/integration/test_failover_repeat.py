#!/usr/bin/env python3
"""Repeated kill -9 of the leader under a running producer, with the
followers acting on the leader's closed connections (raft/lost.c): three
times in a row the leader is SIGKILLed while `tern produce --ack-log`
runs; each time a new writable leader must appear among the survivors, in
a higher term, and the killed node, restarted, must catch up. Afterwards
every acknowledged id is readable at its acknowledged offset, no id is
acknowledged twice, and every node serves the same sequence. The terms
each election took are reported (one round: the next term), not asserted
on, and nothing here is timed."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 6000
KILLS = 3


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = os.path.join(cl.dir, "acks.txt")

        c.step("produce %d in the background" % N)
        p = cl.tern_popen("produce", "q", "--count", N, "--size", 256,
                          "--ack-log", acks, "--id-prefix", "f")
        for k in range(KILLS):
            want = (k + 1) * N // (KILLS + 2)
            ok = h.poll(lambda: len(h.read_ack_log(acks)) >= want or
                        p.poll() is not None, 60, interval=0.01)
            c.check(ok and p.poll() is None,
                    "kill %d: producer running with %d acks" %
                    (k + 1, len(h.read_ack_log(acks))),
                    "producer exited early: rc=%s" % p.poll())
            if not ok or p.poll() is not None:
                break
            # The leader now: an election may have happened since the last
            # round (a slow build, a restarted node), so it is asked for.
            leader = cl.wait_leader(20)
            st = cl.status(leader) or {}
            term0 = st.get("term") or 0
            n_before = len(h.read_ack_log(acks))
            t_kill = time.monotonic()
            cl.kill(leader)
            new_leader = cl.wait_leader(20, exclude=(leader,))
            st2 = cl.status(new_leader) or {}
            term1 = st2.get("term") or 0
            c.info("kill %d: node %d killed at %d acks (term %d); node %d "
                   "writable leader in term %d after %.0f ms (polled)" %
                   (k + 1, leader, n_before, term0, new_leader, term1,
                    1000 * (time.monotonic() - t_kill)))
            c.check(term1 > term0, "kill %d: the new leader's term is "
                    "higher" % (k + 1), "%d -> %d" % (term0, term1))
            ok = h.poll(lambda: len(h.read_ack_log(acks)) > n_before or
                        p.poll() is not None, 60, interval=0.01)
            c.check(len(h.read_ack_log(acks)) > n_before,
                    "kill %d: acknowledgements go on" % (k + 1))
            cl.start_node(leader)
            target = (cl.status(new_leader) or {}).get("last_applied") or 0
            c.check(cl.wait_applied(leader, target, 60),
                    "kill %d: node %d restarted, applied up to %d" %
                    (k + 1, leader, target))
            leader = new_leader
        acked = h.finish_producer(c, p, acks, N)

        c.step("read everything back, from each node alone")
        target = (cl.status(leader) or {}).get("last_applied") or 0
        first = None
        for i in cl.nodes:
            c.check(cl.wait_applied(i, target, 60),
                    "node %d applied up to %d" % (i, target))
            got = cl.consume_all("q", servers=cl.nodes[i].client_addr,
                                 expect=len(acked))
            h.check_acked_readable(c, "node %d" % i, got, acked)
            if first is None:
                first = got
            else:
                c.check(got == first, "node %d serves the same sequence" % i,
                        "%d vs %d messages" % (len(got), len(first)))


if __name__ == "__main__":
    h.run_test(main)
