#!/usr/bin/env python3
"""Online backup and restore into a new cluster (docs/OPERATIONS.md,
"Backup and restore").

Cluster A (3 nodes, 64 KiB segments and snapshots, so the head of the log
is trimmed and the backup starts at a checkpoint): a scratch queue is
filled and deleted, queue "orders" gets messages with keys and headers
and two consumer groups commit offsets, queue "load" gets acknowledged
messages. While a bounded produce load runs on "load", `tern admin
backup` asks a follower for a backup; a second backup of another node
runs at the same time. The backup verifies (`tern admin backup --verify`
and `ternd --verify-backup`); a refused target (inside the data dir, not
empty) and a damaged copy (a flipped byte in a segment) are refused with
a clear error, and so is a restore that keeps the old cluster name.
More is produced after the backup (queue "after"). With one node of
three up (no quorum) a backup is refused, and `--any-state` takes it.

Cluster B (3 new nodes, another cluster_name): node 1 and node 2 are
restored with `ternd --restore-from`, node 3 with
--restore-snapshot-only from a directory holding only the backup's
MANIFEST (it fetches the log from a peer). Every node
serves every message acknowledged before the backup began at the same
offset with the same contents (keys, headers), the groups' committed
offsets are back, "after" does not exist, and new produces continue the
offsets."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

SEG = 65536


def run(cl, args, data=b"", servers=None, timeout=60):
    """The CLI with stdin data (bytes); CompletedProcess with bytes."""
    srv = cl.servers() if servers is None else servers
    cmd = [cl.cli, "-s", srv] + cl.cli_tls + [str(a) for a in args]
    return subprocess.run(cmd, input=data, capture_output=True,
                          timeout=timeout)


def orders_json(cl, servers=None):
    r = run(cl, ["consume", "orders", "--json"], servers=servers)
    if r.returncode != 0:
        return None
    return [json.loads(x) for x in r.stdout.decode().splitlines()
            if x.strip()]


def committed(cl, queue, group, servers=None):
    r = cl.tern("group", "status", queue, group, "--json", servers=servers)
    if r.returncode != 0:
        return None
    for x in map(json.loads, r.stdout.splitlines()):
        if x["group"] == group:
            return x["committed"]
    return None


def same_message(a, b):
    return all(a.get(k) == b.get(k)
               for k in ("offset", "payload", "key", "tag", "headers"))


def phase_a(c, cl, bdir, state):
    c.step("cluster A: 3 nodes, 64 KiB segments and snapshots")
    leader = cl.start()
    follower = 2 if leader != 2 else 3
    other = ({1, 2, 3} - {leader, follower}).pop()

    c.step("fill and delete a scratch queue (the log head is trimmed)")
    for q in ("scratch", "orders", "load"):
        r = cl.tern("queue", "create", q)
        c.check(r.returncode == 0, "queue create %s" % q, r.stderr.strip())
    r = cl.tern("produce", "scratch", "--count", 400, "--size", 1024,
                "--batch", 16, timeout=120)
    c.check(r.returncode == 0, "produce 400 x 1 KiB to scratch",
            r.stderr.strip()[-300:])
    r = cl.tern("queue", "delete", "scratch")
    c.check(r.returncode == 0, "queue delete scratch", r.stderr.strip())

    c.step("orders: keys and headers; two groups commit")
    plan = [
        (b"a1\na2\n", ["--key", "order-1", "--tag", "paid", "--header",
                       "src=web", "--header", "trace=t1"]),
        (b"b1\n", ["--key", "order-2", "--header", "src=app"]),
        (b"plain1\nplain2\nplain3\n", []),
        (b"c1\n", ["--key", "order-1", "--tag", "refund"]),
    ]
    for data, opts in plan:
        r = run(cl, ["produce", "orders"] + opts, data)
        c.check(r.returncode == 0, "produce %r %s" % (data, opts),
                r.stderr.decode().strip()[-300:])
    for g, n in (("billing", 3), ("audit", 6)):
        r = cl.tern("consume", "orders", "--group", g, "--max", n,
                    "--commit")
        c.check(r.returncode == 0, "group %s commits %d" % (g, n),
                r.stderr.strip()[-300:])
    state["orders"] = orders_json(cl)
    c.check(state["orders"] is not None and len(state["orders"]) == 7,
            "orders holds 7 messages",
            state["orders"] and len(state["orders"]))
    state["groups"] = {g: h.poll(lambda g=g: committed(cl, "orders", g), 20)
                       for g in ("billing", "audit")}
    c.check(state["groups"] == {"billing": 3, "audit": 6},
            "committed offsets 3 and 6", state["groups"])

    acks1 = os.path.join(cl.dir, "acks-before.log")
    r = cl.tern("produce", "load", "--count", 300, "--size", 512,
                "--batch", 8, "--ack-log", acks1, "--id-prefix", "p",
                timeout=120)
    c.check(r.returncode == 0, "produce 300 acknowledged to load",
            r.stderr.strip()[-300:])

    c.step("backup refused: inside the data dir, not empty")
    inside = os.path.join(cl.nodes[follower].data_dir, "bk")
    r = cl.tern("admin", "backup", "--node", cl.nodes[follower].client_addr,
                inside)
    c.check(r.returncode != 0 and "inside the data directory" in r.stderr,
            "a target inside the data dir is refused", r.stderr.strip())
    notempty = os.path.join(cl.dir, "notempty")
    os.makedirs(notempty)
    with open(os.path.join(notempty, "x"), "w") as f:
        f.write("x")
    r = cl.tern("admin", "backup", "--node", cl.nodes[follower].client_addr,
                notempty)
    c.check(r.returncode != 0 and "not empty" in r.stderr,
            "a non-empty target is refused", r.stderr.strip())
    r = cl.tern("admin", "backup", "relative/dir")
    c.check(r.returncode != 0 and "absolute" in r.stderr,
            "a relative path is refused", r.stderr.strip())

    c.step("backup of node %d while a produce load runs" % follower)
    acks2 = os.path.join(cl.dir, "acks-load.log")
    load = cl.tern_popen("produce", "load", "--count", 3000, "--size", 256,
                         "--batch", 4, "--ack-log", acks2, "--id-prefix",
                         "L")
    h.poll(lambda: len(h.read_ack_log(acks2)) >= 200 or None, 60)
    acked_before = h.read_ack_log(acks1) + h.read_ack_log(acks2)
    c.info("%d load messages acknowledged when the backup starts" %
           (len(acked_before) - 300))
    bdir2 = os.path.join(cl.dir, "backup-other")
    other_bk = cl.tern_popen("admin", "backup", "--node",
                             cl.nodes[other].client_addr, bdir2)
    r = cl.tern("admin", "backup", "--node", cl.nodes[follower].client_addr,
                bdir, timeout=120)
    c.check(r.returncode == 0 and "last_applied" in r.stdout,
            "backup of node %d" % follower, (r.stdout + r.stderr).strip())
    c.info(r.stdout.strip())
    out, err = other_bk.communicate(timeout=120)
    c.check(other_bk.returncode == 0,
            "a backup of node %d at the same time" % other, err.strip())
    r = cl.tern("admin", "backup", "--node", cl.nodes[follower].client_addr,
                bdir)
    c.check(r.returncode != 0 and "not empty" in r.stderr,
            "the same target again is refused", r.stderr.strip())
    try:
        load.wait(timeout=120)
    except subprocess.TimeoutExpired:
        load.kill()
        load.wait(timeout=10)
    c.check(load.returncode == 0, "the produce load completed")
    state["acked_before"] = acked_before

    c.step("verify the backup")
    r = cl.tern("admin", "backup", "--node", cl.nodes[follower].client_addr,
                "--verify", bdir)
    c.check(r.returncode == 0 and "verified" in r.stdout,
            "tern admin backup --verify", (r.stdout + r.stderr).strip())
    r = subprocess.run([cl.ternd, "--verify-backup", bdir],
                       capture_output=True, text=True, timeout=60)
    c.check(r.returncode == 0 and " ok:" in r.stdout,
            "ternd --verify-backup", (r.stdout + r.stderr).strip())
    files = sorted(os.listdir(os.path.join(bdir, "log")))
    c.check(any(f.endswith(".ckpt") for f in files) and
            not files[0].startswith("%020d" % 0),
            "the backup starts at a checkpoint of the trimmed log", files[:4])

    c.step("more messages after the backup")
    r = cl.tern("queue", "create", "after")
    c.check(r.returncode == 0, "queue create after", r.stderr.strip())
    r = cl.tern("produce", "after", "--count", 20, "--size", 64)
    c.check(r.returncode == 0, "produce 20 to after", r.stderr.strip())


def corrupt_copy(bdir, bad):
    shutil.copytree(bdir, bad)
    segs = sorted(os.listdir(os.path.join(bad, "log")))
    segs = [s for s in segs if s.endswith(".seg")]
    path = os.path.join(bad, "log", segs[-1])
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x20]))
    return segs[-1]


def phase_b(c, nc, bdir, state):
    c.step("damaged backups are refused with a clear error")
    bad = os.path.join(nc.dir, "backup-bad")
    seg = corrupt_copy(bdir, bad)
    r = subprocess.run([nc.ternd, "--verify-backup", bad],
                       capture_output=True, text=True, timeout=60)
    c.check(r.returncode == 1 and "log/%s is damaged" % seg in r.stderr,
            "ternd --verify-backup names the damaged file",
            r.stderr.strip())
    nd = nc.nodes[1]
    r = subprocess.run([nc.ternd, "--config", nd.config, "--restore-from",
                        bad], capture_output=True, text=True, timeout=60)
    c.check(r.returncode != 0 and "damaged" in r.stderr,
            "ternd --restore-from a damaged backup refuses",
            r.stderr.strip()[-300:])
    c.check(os.listdir(nd.data_dir) == [], "and leaves the data dir empty",
            os.listdir(nd.data_dir))
    with open(os.path.join(bad, "MANIFEST"), "r+b") as f:
        f.seek(40)
        f.write(b"\xff")
    r = subprocess.run([nc.ternd, "--verify-backup", bad],
                       capture_output=True, text=True, timeout=60)
    c.check(r.returncode == 1 and "MANIFEST" in r.stderr and
            "damaged" in r.stderr,
            "a flipped manifest byte is refused", r.stderr.strip())
    r = subprocess.run([nc.ternd, "--verify-backup", nc.dir],
                       capture_output=True, text=True, timeout=60)
    c.check(r.returncode == 1 and "not a backup" in r.stderr,
            "a directory without a manifest is refused", r.stderr.strip())

    c.step("cluster B: restore node 1, 2 from the backup, node 3 from its "
           "MANIFEST alone (the log comes from a peer)")
    for i in (1, 2):
        nc.nodes[i].args = ["--restore-from", bdir]
    only = os.path.join(nc.dir, "manifest-only")
    os.makedirs(only)
    shutil.copy(os.path.join(bdir, "MANIFEST"), only)
    nc.nodes[3].args = ["--restore-from", only, "--restore-snapshot-only"]
    leader = nc.start(timeout=40)
    for nd in nc.nodes.values():
        nd.args = []
        c.check("restored from backup" in nd.log_text(),
                "node %d logged its restore" % nd.id)
    c.info("leader %d" % leader)

    c.step("every node serves what was acknowledged before the backup")
    want = state["orders"]
    for i, nd in nc.nodes.items():
        got = h.poll(lambda: (lambda x: x if x and len(x) >= len(want)
                              else None)(orders_json(nc, nd.client_addr)), 30)
        c.check(got is not None and len(got) == len(want) and
                all(same_message(a, b) for a, b in zip(got, want)),
                "node %d: orders' 7 messages, same offsets, keys, headers" %
                i, got)
        got = nc.consume_all("load", servers=nd.client_addr,
                             expect=len(state["acked_before"]))
        h.check_acked_readable(c, "node %d load" % i, got,
                               state["acked_before"])
        r = nc.tern("consume", "after", "--offset", 0,
                    servers=nd.client_addr)
        c.check(r.returncode != 0 and "no such queue" in r.stderr,
                "node %d: queue after (made after the backup) is absent" % i,
                r.stderr.strip()[-200:])
    nd = nc.nodes[3]
    first_ckpt = sorted(f for f in os.listdir(os.path.join(bdir, "log"))
                        if f.endswith(".ckpt"))[0]
    c.check("restored snapshot" in nd.log_text() and
            os.path.exists(os.path.join(nd.data_dir, "index", "log",
                                        first_ckpt)),
            "node 3 fetched the log from a peer, from the checkpoint %s" %
            first_ckpt)
    groups = {g: committed(nc, "orders", g) for g in ("billing", "audit")}
    c.check(groups == state["groups"], "group offsets restored", groups)

    c.step("the new cluster takes new produces")
    r = run(nc, ["produce", "orders", "--key", "order-9"], b"new1\nnew2\n")
    c.check(r.returncode == 0, "produce to orders",
            r.stderr.decode().strip()[-300:])
    got = h.poll(lambda: (lambda x: x if x and len(x) == 9 else None)(
        orders_json(nc)), 20)
    c.check(got is not None and [m["offset"] for m in got[7:]] == [7, 8] and
            [m["payload"] for m in got[7:]] == ["new1", "new2"],
            "new messages at offsets 7 and 8", got and got[7:])
    r = nc.tern("consume", "orders", "--group", "billing", "--max", 2,
                "--commit")
    c.check(r.returncode == 0 and r.stdout.split("\t")[0] == "3",
            "group billing resumes at offset 3", r.stdout[:80])
    for nd in nc.nodes.values():
        c.check(nd.alive(), "node %d running" % nd.id)


def main(c):
    raft = {"snapshot_threshold_bytes": SEG, "snapshot_trailing": 16}
    node = {"log_segment_bytes": SEG}
    state = {}
    with h.Cluster(3, raft=raft, node=node) as cl:
        bdir = os.path.join(cl.dir, "backup")
        phase_a(c, cl, bdir, state)
        for i in cl.nodes:
            cl.stop(i)
        c.step("without a quorum: refused unless --any-state")
        cl.start_node(1)
        alone = cl.nodes[1].client_addr
        c.check(h.poll(lambda: cl.status(1), 20) is not None,
                "node 1 alone answers status")
        r = cl.tern("admin", "backup", "--node", alone,
                    os.path.join(cl.dir, "bk-noq"), servers=alone,
                    timeout_ms=3000)
        c.check(r.returncode != 0 and "no writable leader" in r.stderr,
                "a backup without a leader is refused", r.stderr.strip())
        noq = os.path.join(cl.dir, "bk-any")
        r = cl.tern("admin", "backup", "--node", alone, "--any-state", noq,
                    servers=alone, timeout_ms=3000)
        c.check(r.returncode == 0, "--any-state backs up node 1 as it is",
                r.stderr.strip())
        r = subprocess.run([cl.ternd, "--verify-backup", noq],
                           capture_output=True, text=True, timeout=60)
        c.check(r.returncode == 0, "and that backup verifies",
                r.stderr.strip())
        cl.stop(1)
        node_b = dict(node, cluster_name="restored")
        with h.Cluster(3, raft=raft, node=node) as same:
            c.step("a restore that keeps the old cluster name is refused")
            nd = same.nodes[1]
            r = subprocess.run([same.ternd, "--config", nd.config,
                                "--restore-from", bdir],
                               capture_output=True, text=True, timeout=60)
            c.check(r.returncode == 2 and "cluster_name" in r.stderr,
                    "refused (exit 2), naming cluster_name",
                    r.stderr.strip()[-300:])
        with h.Cluster(3, raft=raft, node=node_b) as nc:
            phase_b(c, nc, bdir, state)
        time.sleep(0)


if __name__ == "__main__":
    h.run_test(main)
