#!/usr/bin/env python3
"""The index reaching its LMDB map ([node] index_map_bytes) is not a full
disk, and loses nothing.

Three nodes with index_map_bytes = 16M (the smallest allowed) take small
produces (window 32) until the index is full. Every node reaches it at
the same entry: at least a majority stop (a failed apply fail-stops the
replica) after logging "index map full: raise [node] index_map_bytes",
and none takes the disk-full path (no "disk full: rejecting writes", the
disk reserve kept). Started again with 256M, every node serves every
acknowledged id at its acknowledged offset, and produces are accepted
again."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

FULL = "index map full: raise [node] index_map_bytes"


def main(c):
    with h.Cluster(3, node={"index_map_bytes": "16M"}) as cl:
        c.step("3 nodes with index_map_bytes 16M")
        cl.start()
        cl.tern("queue", "create", "m", "--max-age", 0, check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        c.step("produce until the index map is full (bounded: 1.5 M "
               "messages, 150 s)")
        r = cl.tern("produce", "m", "--count", 1500000, "--size", 8,
                    "--batch", 64, "--window", 32, "--ack-log", acks,
                    "--id-prefix", "p", timeout=150, timeout_ms=3000)
        acked = h.read_ack_log(acks)
        c.info("produce rc=%d after %d acknowledged: %s" %
               (r.returncode, len(acked), r.stderr.strip()[-200:]))
        c.check(r.returncode != 0 and len(acked) > 1000,
                "produce stopped with an error after %d acknowledged" %
                len(acked))
        def stopped_full():
            return [i for i, nd in cl.nodes.items()
                    if not nd.alive() and FULL in nd.log_text()]
        h.poll(lambda: len(stopped_full()) >= 2, 30)
        c.check(len(stopped_full()) >= 2,
                "a majority logged \"%s\" and stopped" % FULL,
                "nodes %s" % stopped_full())
        for i, nd in sorted(cl.nodes.items()):
            log = nd.log_text()
            c.check("disk full: rejecting writes" not in log and
                    "disk reserve released" not in log,
                    "node %d did not take the disk-full path" % i)
            c.check(os.path.exists(os.path.join(nd.data_dir,
                                                "disk-reserve")),
                    "node %d kept its disk reserve" % i)

        c.step("restart every node with index_map_bytes 256M")
        for i in sorted(cl.nodes):
            if cl.nodes[i].alive():
                c.check(cl.stop(i, timeout=30) == 0, "node %d exited 0" % i)
        cl.node_extra["index_map_bytes"] = "256M"
        for nd in cl.nodes.values():
            cl.write_config(nd)
        cl.start()
        for i in sorted(cl.nodes):
            got = []

            def node_has_all():
                r = cl.tern("--read-from", "first", "consume", "m",
                            "--offset", 0, servers=[i], timeout=60)
                got[:] = h.parse_consume(r.stdout)
                return len(got) >= len(acked)
            h.poll(node_has_all, 120, interval=1)
            h.check_acked_readable(c, "node %d alone after the restart" % i,
                                   got, acked)
        r = cl.tern("produce", "m", "--count", 100, "--size", 8)
        c.check(r.returncode == 0, "produce accepted again",
                r.stderr.strip()[-200:])


if __name__ == "__main__":
    h.run_test(main)
