#!/usr/bin/env python3
"""Message trace on 3 real nodes (docs/MESSAGES.md, "Query and seek"):
produce through the CLI (libtern's issued producer id, two batches),
commit two consumer groups, then `tern message trace` on every node
gives the same raft index, a term > 0, the batch seq and position, the
key and tag, and the groups past the message with their latest commit;
a message trimmed by retention answers TERN_EOFFSET naming the first
offset; an offset past the end and an unknown queue are refused."""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def trace(cl, queue, offset, servers=None):
    """(returncode, parsed JSON or None, stderr)."""
    r = cl.tern("message", "trace", queue, offset, "--json",
                servers=servers)
    js = None
    if r.returncode == 0:
        try:
            js = json.loads(r.stdout)
        except ValueError:
            js = None
    return r.returncode, js, r.stderr


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes, create a queue, produce two batches")
        cl.start()
        r = cl.tern("queue", "create", "orders")
        c.check(r.returncode == 0, "queue create orders", r.stderr.strip())
        data = b"m0\nm1\nm2\n"
        p = subprocess.run(
            [cl.cli, "-s", cl.servers()] + cl.cli_tls +
            ["produce", "orders", "--batch", "2", "--key", "order-7",
             "--tag", "paid"],
            input=data, capture_output=True, timeout=60)
        c.check(p.returncode == 0, "produce 3 messages in batches of 2",
                p.stderr.decode()[-300:])

        c.step("commit group g past every message, group h past offset 0")
        r = cl.tern("consume", "orders", "--group", "g", "--commit")
        c.check(r.returncode == 0 and len(r.stdout.split("\n")) >= 3,
                "group g reads and commits 3 messages", r.stderr.strip())
        r = cl.tern("consume", "orders", "--group", "h", "--commit",
                    "--max", "1")
        c.check(r.returncode == 0, "group h reads and commits 1 message",
                r.stderr.strip())

        c.step("trace on every node")
        first = {}
        for i, nd in cl.nodes.items():
            got = {}
            for off in range(3):
                js = None
                for _ in range(100):  # bounded: followers apply soon
                    code, js, err = trace(cl, "orders", off,
                                          servers=nd.client_addr)
                    groups = [g["name"] for g in js["groups"]] if js else []
                    if js is not None and "g" in groups and \
                            (off > 0 or "h" in groups):
                        break
                    time.sleep(0.1)
                c.check(js is not None, "node %d: trace orders %d" %
                        (i, off), err)
                got[off] = js
            t0, t1, t2 = got[0], got[1], got[2]
            c.check(all(t["term"] is not None and t["term"] > 0
                        for t in (t0, t1, t2)),
                    "node %d: term > 0" % i, [t["term"] for t in got.values()])
            c.check(all(t["raft_index"] > 0 for t in (t0, t1, t2)) and
                    t0["raft_index"] == t1["raft_index"] and
                    t2["raft_index"] > t1["raft_index"],
                    "node %d: offsets 0 and 1 share an entry, 2 is later" % i,
                    [t["raft_index"] for t in got.values()])
            c.check(t0["producer_id"] != 0 and
                    t0["producer_id"] == t2["producer_id"],
                    "node %d: the issued producer id" % i, t0["producer_id"])
            c.check((t0["seq"], t0["batch_pos"], t0["batch_count"]) ==
                    (1, 0, 2) and
                    (t1["seq"], t1["batch_pos"], t1["batch_count"]) ==
                    (1, 1, 2) and
                    (t2["seq"], t2["batch_pos"], t2["batch_count"]) ==
                    (2, 0, 1),
                    "node %d: batch seq and position" % i,
                    [(t["seq"], t["batch_pos"], t["batch_count"])
                     for t in got.values()])
            c.check(all(t.get("key") == "order-7" and t.get("tag") == "paid"
                        and t["size"] == 2 and t["append_ms"] > 0
                        for t in (t0, t1, t2)),
                    "node %d: key, tag, size, append time" % i)
            g0 = {g["name"]: g for g in t0["groups"]}
            c.check(set(g0) == {"g", "h"} and
                    g0["g"]["committed_offset"] == 3 and
                    g0["h"]["committed_offset"] == 1,
                    "node %d: groups g and h are past offset 0" % i,
                    t0["groups"])
            c.check(all(g["commit_index"] is not None and
                        g["commit_index"] > t2["raft_index"] and
                        g["commit_ms"] is not None and
                        g["commit_ms"] >= t2["append_ms"]
                        for g in t0["groups"]),
                    "node %d: each group's commit time and raft index" % i,
                    t0["groups"])
            c.check([g["name"] for g in t1["groups"]] == ["g"],
                    "node %d: only g is past offset 1" % i, t1["groups"])
            for off, t in got.items():
                if off in first:
                    c.check(t == first[off],
                            "node %d: offset %d traced as on the first node"
                            % (i, off), (t, first[off]))
                else:
                    first[off] = t

        c.step("text form")
        r = cl.tern("message", "trace", "orders", 1)
        c.check(r.returncode == 0 and
                "committed  raft index %d, term %d" %
                (first[1]["raft_index"], first[1]["term"]) in r.stdout and
                "batch seq 1, message 2 of 2" in r.stdout and
                "  g committed offset 3" in r.stdout,
                "text trace of offset 1", r.stdout + r.stderr)

        c.step("an offset past the end and an unknown queue")
        code, _, err = trace(cl, "orders", 3)
        c.check(code == 1 and "offset out of range" in err,
                "offset 3 is past the end (TERN_EOFFSET)", err)
        code, _, err = trace(cl, "nope", 0)
        c.check(code == 1 and "no such queue" in err,
                "unknown queue (TERN_ENOQUEUE)", err)

        c.step("a trimmed message answers TERN_EOFFSET naming the first offset")
        r = cl.tern("queue", "create", "short", "--max-messages", 2)
        c.check(r.returncode == 0, "create short with max_messages 2",
                r.stderr.strip())
        for k in range(4):
            r = cl.tern("produce", "short", "--count", "1", "--size", "8")
            c.check(r.returncode == 0, "produce one message to short (%d)" % k,
                    r.stderr.strip())
        err = ""
        for _ in range(200):  # bounded: the leader trims after a flush
            code, js, err = trace(cl, "short", 0)
            if code != 0 and "offset out of range" in err:
                break
            time.sleep(0.1)
        c.check("offset out of range" in err and "first offset 2" in err,
                "trace short 0 after the trim: TERN_EOFFSET", err)
        code, js, err = trace(cl, "short", 3)
        c.check(code == 0 and js["term"] > 0, "the retained offset 3 traces",
                err)


if __name__ == "__main__":
    h.run_test(main)
