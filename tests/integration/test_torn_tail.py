#!/usr/bin/env python3
"""(g) torn segment tail: a stopped node's last commit-log segment
(DATA/index/log/*.seg) gets garbage appended (first round) or loses its
last 700 bytes (second round, after kill -9). The node must start, log the
truncation, catch up, and serve every acknowledged message (the cluster
re-replicates whatever was cut)."""
import glob
import os
import random
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def last_segment(nd):
    segs = sorted(glob.glob(os.path.join(nd.data_dir, "index", "log",
                                         "*.seg")))
    return segs[-1] if segs else None


def truncation_lines(text):
    """Log lines reporting a non-zero truncation (the "index opened" line
    always carries truncated_bytes=N; N > 0 or any other truncation
    message counts)."""
    out = []
    for line in text.splitlines():
        m = re.search(r"truncated_bytes=(\d+)", line)
        if m:
            if int(m.group(1)) > 0:
                out.append(line)
        elif "truncat" in line.lower():
            out.append(line)
    return out


def main(c):
    rnd = random.Random(7)
    with h.Cluster(3) as cl:
        c.step("start 3 nodes, produce 500")
        leader = cl.start()
        victim = next(i for i in cl.nodes if i != leader)
        nd = cl.nodes[victim]
        cl.tern("queue", "create", "torn", check=True)
        acked = []
        for rnd_no, (damage, sig) in enumerate((("append", "TERM"),
                                                ("truncate", "KILL"))):
            acks = os.path.join(cl.dir, "acks%d.txt" % rnd_no)
            r = cl.tern("produce", "torn", "--count", 500, "--size", 300,
                        "--ack-log", acks, "--id-prefix", "r%d" % rnd_no)
            c.check(r.returncode == 0, "produce 500 (round %d)" % rnd_no,
                    r.stderr.strip()[-300:])
            acked += h.read_ack_log(acks)
            leader = cl.wait_leader(20)
            target = (cl.status(leader) or {}).get("last_applied") or 0
            c.check(cl.wait_applied(victim, target, 30),
                    "node %d caught up before the stop" % victim)

            c.step("round %d: stop node %d (SIG%s), %s its last segment" %
                   (rnd_no, victim, sig, damage))
            if sig == "TERM":
                cl.stop(victim)
            else:
                cl.kill(victim)
            seg = last_segment(nd)
            c.check(seg is not None, "node %d has a segment file" % victim,
                    os.path.join(nd.data_dir, "index", "log"))
            if seg is None:
                return
            size = os.path.getsize(seg)
            if damage == "append":
                with open(seg, "ab") as f:
                    f.write(bytes(rnd.getrandbits(8) for _ in range(1000)))
                c.info("%s: %d -> %d bytes" % (seg, size, size + 1000))
            else:
                cut = min(700, size - 32)
                os.truncate(seg, size - cut)
                c.info("%s: %d -> %d bytes" % (seg, size, size - cut))
            log_before = len(nd.log_text())

            c.step("round %d: restart node %d" % (rnd_no, victim))
            cl.start_node(victim)
            st = h.poll(lambda: cl.status(victim), 15, interval=0.2)
            c.check(st is not None and nd.alive(),
                    "node %d starts and answers status" % victim, st)
            new = truncation_lines(nd.log_text()[log_before:])
            c.check(new, "node %d log reports the truncation" % victim,
                    "no truncated_bytes>0 line in %s" % nd.log)
            for line in new:
                c.info("log: %s" % line.strip()[:240])
            leader = cl.wait_leader(20)
            target = (cl.status(leader) or {}).get("last_applied") or 0
            c.check(cl.wait_applied(victim, target, 60),
                    "node %d last_applied reaches %d" % (victim, target),
                    cl.status(victim))
            got = cl.consume_all("torn", servers=nd.client_addr,
                                 expect=len(acked))
            h.check_acked_readable(c, "node %d round %d" % (victim, rnd_no),
                                   got, acked)
            ref = cl.consume_all("torn", servers=cl.nodes[leader].client_addr,
                                 expect=len(acked))
            c.check(got == ref, "node %d serves the leader's sequence" %
                    victim, "%d vs %d" % (len(got), len(ref)))


if __name__ == "__main__":
    h.run_test(main)
