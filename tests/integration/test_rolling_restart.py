#!/usr/bin/env python3
"""Rolling restart under load: 3 nodes, a steady produce load through the
CLI (rounds of 300 messages back to back, each round its own idempotent
producer), and every node restarted in turn the way
scripts/rolling-restart.sh does it: followers first, the leader last after
`tern cluster transfer`, each stopped by PID with SIGTERM and back and
caught up before the next. No produce round may fail (zero client errors:
libtern rides over the redirects and the stopped nodes), every
acknowledged id reads back once at its acknowledged offset on every node,
and the longest pause between acknowledgements is printed (a figure, not
an assertion: bench/RESULTS.md, "Rolling restart")."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_util  # noqa: E402
import tern_harness as h  # noqa: E402


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes, queue q")
        cl.start()
        cl.tern("queue", "create", "q", check=True)

        c.step("steady produce load")
        load = ops_util.ProduceLoad(cl, "q", max_s=100).start()
        c.check(load.wait_acks(600, 30), "load running (600 acks)",
                len(load.acked()))

        c.step("rolling restart: followers first, leader last (transfer)")
        recs = ops_util.rolling_restart(cl, c)
        c.check(len(load.acked()) > 600, "acknowledgements went on")
        n_at_end = len(load.acked())
        load.wait_acks(n_at_end + 300, 30)
        c.check(load.stop(), "load stopped (bounded rounds)")
        gap, at = load.gap()
        acked = load.acked()
        print("  figure  rolling restart: rounds=%d acked=%d client_errors=%d "
              "longest_write_gap_ms=%.0f (at %.1f s) transfer_ms=%.0f "
              "stop_ms=%s" %
              (load.rounds, len(acked), len(load.errors), 1000 * gap,
               at or 0, [r.get("transfer_ms") for r in recs
                         if r["was_leader"]][0],
               ["%.0f" % r["stop_ms"] for r in recs]), flush=True)
        c.check(not load.errors, "zero client errors over %d produce rounds"
                % load.rounds, load.errors[:3])
        c.check(not h.duplicates([a[0] for a in acked]),
                "no id acknowledged twice")

        c.step("consume everything from each node alone")
        for i in sorted(cl.nodes):
            got = cl.consume_all("q", servers=cl.nodes[i].client_addr,
                                 expect=len(acked), timeout=60)
            h.check_acked_readable(c, "node %d" % i, got, acked)


if __name__ == "__main__":
    h.run_test(main)
