#!/usr/bin/env python3
"""Message properties on 3 real nodes (docs/MESSAGES.md): produce with a
key, a tag and headers through the CLI beside an old-format produce (no
properties); every node serves the same properties; a tag filter skips
messages on the server and a group commit moves past them; message get by
offset, id and key (a key with several messages, newest first); --raw
carries binary payload bytes unchanged; properties over a limit are
refused before anything is appended."""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def run(cl, args, data=b"", servers=None, timeout=60):
    """The CLI with stdin data (bytes); CompletedProcess with bytes."""
    if servers is None:
        srv = cl.servers()
    else:
        srv = servers
    cmd = [cl.cli, "-s", srv] + cl.cli_tls + [str(a) for a in args]
    return subprocess.run(cmd, input=data, capture_output=True,
                          timeout=timeout)


def json_lines(out):
    return [json.loads(x) for x in out.decode().splitlines() if x.strip()]


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes, create queues")
        cl.start()
        for q in ("events", "other"):
            r = cl.tern("queue", "create", q)
            c.check(r.returncode == 0, "queue create %s" % q,
                    r.stderr.strip())

        c.step("produce with properties beside an old-format produce")
        plan = [
            (b"a1\na2\n", ["--key", "order-1", "--tag", "paid", "--header",
                           "src=web", "--header", "trace=t1"]),
            (b"b1\n", ["--key", "order-2", "--tag", "refund"]),
            (b"plain1\n", []),
            (b"c1\n", ["--key", "order-1", "--tag", "paid"]),
        ]
        for data, opts in plan:
            r = run(cl, ["produce", "events"] + opts, data)
            c.check(r.returncode == 0, "produce %r %s" % (data, opts),
                    r.stderr.decode().strip()[-300:])
        want = [  # offset, payload, key, tag, headers
            (0, "a1", "order-1", "paid", {"src": "web", "trace": "t1"}),
            (1, "a2", "order-1", "paid", {"src": "web", "trace": "t1"}),
            (2, "b1", "order-2", "refund", None),
            (3, "plain1", None, None, None),
            (4, "c1", "order-1", "paid", None),
        ]

        c.step("every node serves the same properties")
        ids = None
        for i, nd in cl.nodes.items():
            got = []
            for _ in range(100):  # bounded: followers apply soon
                r = run(cl, ["consume", "events", "--json"],
                        servers=nd.client_addr)
                got = json_lines(r.stdout) if r.returncode == 0 else []
                if len(got) >= len(want):
                    break
                time.sleep(0.1)
            c.check(len(got) == len(want), "node %d: %d messages" %
                    (i, len(want)), r.stderr.decode()[-300:])
            ok = all(g["offset"] == w[0] and g["payload"] == w[1] and
                     g.get("key") == w[2] and g.get("tag") == w[3] and
                     g.get("headers") == w[4] and g["append_ts"] > 0
                     for g, w in zip(got, want))
            c.check(ok, "node %d: payloads, keys, tags, headers" % i, got)
            c.check(all(len(g["id"]) == 32 for g in got),
                    "node %d: 32-digit message ids" % i)
            c.check(all(g["producer_ts"] > 0 for g in got
                        if g.get("key")),
                    "node %d: producer timestamps set by libtern" % i)
            node_ids = [g["id"] for g in got]
            c.check(ids is None or node_ids == ids,
                    "node %d: same message ids as node 1" % i)
            ids = node_ids

        c.step("tag filter: filtered messages never arrive")
        r = run(cl, ["consume", "events", "--tag", "refund", "--format",
                     "%o %t %k %p"])
        c.check(r.stdout.decode() == "2 refund order-2 b1\n",
                "--tag refund gives offset 2 only", r.stdout)
        r = run(cl, ["consume", "events", "--tag", "paid || refund",
                     "--format", "%o"])
        c.check(r.stdout.decode().split() == ["0", "1", "2", "4"],
                "--tag 'paid || refund' skips the untagged offset 3",
                r.stdout)
        r = run(cl, ["consume", "events", "--tag", "a b"])
        c.check(r.returncode != 0 and b"tag filter" in r.stderr,
                "a bad filter is refused", r.stderr)

        c.step("group commit moves past filtered messages")
        r = run(cl, ["consume", "events", "--group", "g", "--commit",
                     "--tag", "refund", "--format", "%o"])
        c.check(r.returncode == 0 and r.stdout.decode().split() == ["2"],
                "group g with --tag refund reads offset 2", r.stdout)
        r = run(cl, ["produce", "events"], b"late\n")
        c.check(r.returncode == 0, "produce one more (offset 5)")
        r = run(cl, ["consume", "events", "--group", "g", "--commit",
                     "--format", "%o %p"])
        c.check(r.stdout.decode() == "5 late\n",
                "group g resumes after the skipped messages (offset 5 only)",
                r.stdout)

        c.step("message get by offset, id and key on every node")
        for i, nd in cl.nodes.items():
            a = nd.client_addr
            r = run(cl, ["message", "get", "events", "--offset", 2,
                         "--json"], servers=a)
            g = json_lines(r.stdout)
            c.check(len(g) == 1 and g[0]["payload"] == "b1" and
                    g[0]["key"] == "order-2",
                    "node %d: get --offset 2" % i, r.stdout)
            r = run(cl, ["message", "get", "events", "--id", ids[4],
                         "--format", "%o %p"], servers=a)
            c.check(r.stdout.decode() == "4 c1\n",
                    "node %d: get --id of offset 4" % i,
                    r.stdout + r.stderr)
            r = run(cl, ["message", "get", "events", "--key", "order-1",
                         "--format", "%o"], servers=a)
            c.check(r.stdout.decode().split() == ["4", "1", "0"],
                    "node %d: get --key order-1, newest first" % i,
                    r.stdout)
        r = run(cl, ["message", "get", "events", "--key", "order-1", "--max",
                     2, "--format", "%o"])
        c.check(r.stdout.decode().split() == ["4", "1"], "--max 2", r.stdout)
        r = run(cl, ["message", "get", "events", "--key", "nobody"])
        c.check(r.returncode == 0 and r.stdout == b"",
                "a key without messages prints nothing", r.stdout)
        r = run(cl, ["message", "get", "other", "--id", ids[0]])
        c.check(r.returncode != 0 and b"offset 0" in r.stderr,
                "an id of another queue is not found", r.stderr)
        r = run(cl, ["message", "get", "events", "--offset", 99])
        c.check(r.returncode != 0, "an offset past the end is not found",
                r.stderr)

        c.step("--raw round trip of binary payload bytes")
        blob = bytes(range(256)) + b"\n\x00tail\r\n"
        r = run(cl, ["produce", "events", "--raw", "--key", "bin"], blob)
        c.check(r.returncode == 0, "produce --raw", r.stderr.decode()[-300:])
        r = run(cl, ["message", "get", "events", "--key", "bin", "--raw",
                     "--delimiter", ""])
        c.check(r.stdout == blob, "message get --raw returns the bytes",
                "%d bytes" % len(r.stdout))
        r = run(cl, ["consume", "events", "--offset", 6, "--max", 1,
                     "--raw"])
        c.check(r.stdout == blob + b"\n",
                "consume --raw returns the bytes and the delimiter",
                "%d bytes" % len(r.stdout))

        c.step("properties over a limit are refused whole")
        r = run(cl, ["produce", "events", "--tag", "bad tag"], b"x\n")
        c.check(r.returncode != 0 and b"tag" in r.stderr,
                "a tag with a space is refused", r.stderr)
        r = run(cl, ["produce", "events", "--key", "k" * 300], b"x\n")
        c.check(r.returncode != 0 and b"key" in r.stderr,
                "a 300-byte key is refused", r.stderr)
        r = run(cl, ["consume", "events", "--format", "%o"])
        c.check(r.stdout.decode().split() ==
                [str(i) for i in range(7)],
                "nothing was appended by the refused produces", r.stdout)


if __name__ == "__main__":
    h.run_test(main)
