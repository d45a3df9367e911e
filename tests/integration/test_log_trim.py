#!/usr/bin/env python3
"""The head of the commit log is freed once no queue needs it, and a node
that fell behind the trimmed head catches up from the leader's checkpoint
(docs/MESSAGES.md "Freeing space", index/ckpt.c).

Three nodes with 64 KiB log segments (the checkpoint interval too) and a
snapshot every 64 KiB. A follower is stopped first. ~3 MiB go to queue
"old", "old" is deleted, "keep" gets acknowledged messages, then a scratch
queue fills and is deleted (three times) so snapshots keep coming. The
segments of both running nodes must shrink well below what "old" took,
with checkpoints beside them. The stopped node restarts behind the
leader's log start: it fetches the leader's checkpoint, serves every
acknowledged message of "keep" alone, knows nothing of "old", holds a
small log, and does so again after a restart (a rebuild from that
checkpoint)."""
import glob
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

SEG = 65536


def log_bytes(nd):
    segs = glob.glob(os.path.join(nd.data_dir, "index", "log", "*.seg"))
    ckpts = glob.glob(os.path.join(nd.data_dir, "index", "log", "*.ckpt"))
    return (sum(os.path.getsize(p) for p in segs), len(segs), len(ckpts),
            sorted(os.path.basename(p) for p in segs)[:1])


def produce(c, cl, queue, n, acks=None, prefix="x"):
    args = ["produce", queue, "--count", n, "--size", 1024, "--batch", 16]
    if acks:
        args += ["--ack-log", acks, "--id-prefix", prefix]
    r = cl.tern(*args, timeout=150)
    c.check(r.returncode == 0, "produce %d to %s" % (n, queue),
            r.stderr.strip()[-300:])


def main(c):
    raft = {"snapshot_threshold_bytes": SEG, "snapshot_trailing": 16}
    node = {"log_segment_bytes": SEG}
    with h.Cluster(3, raft=raft, node=node) as cl:
        c.step("start 3 nodes (64 KiB segments, snapshot every 64 KiB)")
        leader = cl.start()
        lagger = 3 if leader != 3 else 2
        c.step("stop node %d" % lagger)
        c.check(cl.stop(lagger) == 0, "node %d exited 0" % lagger)
        leader = cl.wait_leader(20, exclude=(lagger,))
        cl.tern("queue", "create", "old", check=True)
        produce(c, cl, "old", 3000)
        leader = cl.wait_leader(20, exclude=(lagger,))
        full, nseg, _, _ = log_bytes(cl.nodes[leader])
        c.info("leader node %d: %d segments, %d bytes" % (leader, nseg, full))
        c.check(full > 3000 * 1024, "the log holds queue old (%d bytes)" %
                full)

        c.step("delete old; produce to keep; fill and delete a scratch queue")
        cl.tern("queue", "delete", "old", check=True)
        cl.tern("queue", "create", "keep", check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        produce(c, cl, "keep", 200, acks, "k")
        acked = h.read_ack_log(acks)
        c.check(len(acked) == 200, "200 acknowledged", len(acked))
        for rnd in range(3):
            cl.tern("queue", "create", "scratch", check=True)
            produce(c, cl, "scratch", 300)
            cl.tern("queue", "delete", "scratch", check=True)

        # What may stay: keep (200 KiB), the last scratch round (300 KiB)
        # until the next snapshots, a segment being filled, slack.
        bound = full // 2
        for i in sorted(cl.nodes):
            if i == lagger:
                continue
            nd = cl.nodes[i]

            def trimmed(nd=nd):
                b, n, k, first = log_bytes(nd)
                return (b, n, k, first) if b < bound else None
            got = h.poll(trimmed, 30, 0.5)
            b, n, k, first = got or log_bytes(nd)
            c.check(got is not None, "node %d's segments shrank to %d bytes "
                    "(%d files, first %s) from %d (bound %d)" %
                    (i, b, n, first, full, bound))
            c.check(k >= 1, "node %d: checkpoints beside them (%d)" % (i, k))

        c.step("restart node %d: behind the leader's log start" % lagger)
        cl.start_node(lagger)
        st = cl.status(leader)
        target = (st or {}).get("last_applied") or 0
        c.check(cl.wait_applied(lagger, target, 90),
                "node %d last_applied reaches %d" % (lagger, target),
                cl.status(lagger))
        nd = cl.nodes[lagger]
        got = cl.consume_all("keep", servers=nd.client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "node %d" % lagger, got, acked)
        r = cl.tern("consume", "old", "--offset", 0, servers=nd.client_addr)
        c.check(r.returncode != 0 and "no such queue" in r.stderr,
                "node %d knows nothing of queue old" % lagger,
                r.stderr.strip()[-200:])
        lb, ln, lk, lfirst = log_bytes(nd)
        c.check(lb < bound and lfirst != ["%020d.seg" % 0],
                "node %d's log starts at the leader's checkpoint (%d bytes, "
                "first %s)" % (lagger, lb, lfirst))

        c.step("restart node %d again: it rebuilds from its checkpoint" %
               lagger)
        c.check(cl.stop(lagger) == 0, "node %d exited 0" % lagger)
        cl.start_node(lagger)
        time.sleep(0.5)
        got = cl.consume_all("keep", servers=nd.client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "node %d after a restart" % lagger, got,
                               acked)
        text = nd.log_text()
        c.check("truncated_bytes=0" in text.split("index opened")[-1][:400],
                "the rebuild cut nothing", text[-600:])
        c.check(nd.alive(), "node %d still running" % lagger)


if __name__ == "__main__":
    h.run_test(main)
