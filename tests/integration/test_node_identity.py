#!/usr/bin/env python3
"""(l) a node knows its data directory, refuses damaged raft metadata and
keeps its files private. One 3-node cluster; a follower is stopped for
each case and restarted after it:

  wrong_node:    ternd with another node's id (same cluster) on the
                 follower's data dir exits 2 before touching it, its log
                 names both identities; the dir is byte-identical after;
  wrong_cluster: the follower's own id with --cluster-name other: exit 2;
  term_flip:     a byte of the term flipped in raft/metadata1 and 2 of the
                 stopped follower: with `[raft] rejoin_on_corrupt = false`
                 it refuses to start (exit 1, both values in the log)
                 while the other two keep serving; restored, it starts
                 and catches up (with the default it would move its raft
                 dir aside and rejoin: test_membership_rejoin.py);
  open_dir:      the data dir chmod 755: refused (exit 2, the log says
                 chmod 700); with allow_open_data_dir = true it starts and
                 warns;
  modes:         after the run every data dir is 0700 and every file
                 under it 0600 (no group or world bits).
"""
import hashlib
import os
import stat
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

QUEUE = "ident"


def tree_digest(root):
    """{relative path: sha256} of every regular file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(
                    fh.read()).hexdigest()
    return out


def run_ternd(cl, config, log, *extra):
    """Run ternd to its exit (it must refuse); returns (exit code, log)."""
    with open(log, "wb") as lf:
        try:
            r = subprocess.run([cl.ternd, "--config", config] + list(extra),
                               stdin=subprocess.DEVNULL, stdout=lf,
                               stderr=subprocess.STDOUT, timeout=30)
            rc = r.returncode
        except subprocess.TimeoutExpired:
            rc = None
    with open(log, "r", errors="replace") as lf:
        return rc, lf.read()


def start_and_wait_exit(cl, i, timeout=30):
    """Start node i with the harness; its exit code, None if it runs."""
    nd = cl.nodes[i]
    cl.start_node(i)
    try:
        return nd.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def produce(c, cl, n, prefix, what):
    acks = os.path.join(cl.dir, "acks-%s.txt" % prefix)
    r = cl.tern("produce", QUEUE, "--count", n, "--size", 100,
                "--ack-log", acks, "--id-prefix", prefix)
    c.check(r.returncode == 0, "%s: produce %d" % (what, n),
            r.stderr.strip()[-300:])
    return h.read_ack_log(acks)


def restart_caught_up(c, cl, i, what):
    cl.start_node(i)
    leader = cl.wait_leader(20)
    target = (cl.status(leader) or {}).get("last_applied") or 0
    c.check(cl.wait_applied(i, target, 30),
            "%s: node %d restarted and caught up" % (what, i))


def main(c):
    # raft_uv: term_flip damages its metadata1 and 2 beside tern's term
    # record (tern's store keeps only the latter: tests/unit/raft meta).
    with h.Cluster(3, raft={"rejoin_on_corrupt": "false",
                            "log_store": "uv"}) as cl:
        c.step("start 3 nodes, produce")
        leader = cl.start()
        cl.tern("queue", "create", QUEUE, check=True)
        acked = produce(c, cl, 50, "a", "start")
        leader = cl.wait_leader(20)
        victim, other = [i for i in sorted(cl.nodes) if i != leader][:2]
        nd = cl.nodes[victim]
        target = (cl.status(leader) or {}).get("last_applied") or 0
        c.check(cl.wait_applied(victim, target, 30),
                "node %d caught up" % victim)

        c.step("wrong_node: node %d's config on node %d's data dir" %
               (other, victim))
        rc = cl.stop(victim)
        c.check(rc == 0, "node %d stopped cleanly" % victim, rc)
        before = tree_digest(nd.data_dir)
        cfg = os.path.join(cl.dir, "wrong-node.ini")
        with open(cl.nodes[other].config) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace("data_dir = %s" % cl.nodes[other].data_dir,
                                 "data_dir = %s" % nd.data_dir))
        rc, log = run_ternd(cl, cfg, os.path.join(cl.dir, "wrong-node.log"))
        c.check(rc == 2, "wrong_node: exit code 2", rc)
        c.check("data dir belongs to another node" in log,
                "wrong_node: log says whose dir it is", log[-600:])
        c.check("dir_node=%d " % victim in log and
                "node=%d" % other in log and "dir_cluster=tern" in log,
                "wrong_node: log names both identities", log[-600:])
        c.check(tree_digest(nd.data_dir) == before,
                "wrong_node: node %d's data dir untouched" % victim)

        c.step("wrong_cluster: node %d with --cluster-name other" % victim)
        rc, log = run_ternd(cl, nd.config,
                            os.path.join(cl.dir, "wrong-cluster.log"),
                            "--cluster-name", "other")
        c.check(rc == 2, "wrong_cluster: exit code 2", rc)
        c.check("dir_cluster=tern" in log and "cluster=other" in log,
                "wrong_cluster: log names both clusters", log[-600:])
        c.check(tree_digest(nd.data_dir) == before,
                "wrong_cluster: data dir untouched")
        restart_caught_up(c, cl, victim, "wrong_*")

        c.step("term_flip: a term byte flipped in node %d's raft metadata" %
               victim)
        cl.stop(victim)
        raft_dir = os.path.join(nd.data_dir, "raft")
        flipped = []
        for name in ("metadata1", "metadata2"):
            p = os.path.join(raft_dir, name)
            if not os.path.exists(p):
                continue
            with open(p, "r+b") as f:
                f.seek(23)  # the term's most significant byte
                b = f.read(1)
                f.seek(23)
                f.write(bytes([b[0] ^ 0x01]))
            flipped.append(p)
        c.check(len(flipped) > 0, "term_flip: metadata files flipped")
        log_before = len(nd.log_text())
        rc = start_and_wait_exit(cl, victim)
        new_log = nd.log_text()[log_before:]
        c.check(rc == 1, "term_flip: node %d refused to start (exit 1)" %
                victim, rc)
        c.check("term record mismatch" in new_log,
                "term_flip: log names raft_uv's and tern's values",
                new_log[-600:])
        acked += produce(c, cl, 30, "b", "term_flip: majority")
        ldr = cl.wait_leader(20)
        got = cl.consume_all(QUEUE, servers=cl.nodes[ldr].client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "term_flip: leader %d" % ldr, got, acked)
        rc = start_and_wait_exit(cl, victim, timeout=10)
        c.check(rc == 1, "term_flip: refused again (not repaired)", rc)
        for p in flipped:
            with open(p, "r+b") as f:
                f.seek(23)
                b = f.read(1)
                f.seek(23)
                f.write(bytes([b[0] ^ 0x01]))
        restart_caught_up(c, cl, victim, "term_flip: restored")

        c.step("open_dir: node %d's data dir chmod 755" % victim)
        cl.stop(victim)
        os.chmod(nd.data_dir, 0o755)
        log_before = len(nd.log_text())
        rc = start_and_wait_exit(cl, victim)
        new_log = nd.log_text()[log_before:]
        c.check(rc == 2, "open_dir: refused with exit code 2", rc)
        c.check("chmod 700" in new_log, "open_dir: log says how to fix it",
                new_log[-600:])
        with open(nd.config) as f:
            text = f.read()
        with open(nd.config, "w") as f:
            f.write(text.replace("[node]\n",
                                 "[node]\nallow_open_data_dir = true\n", 1))
        log_before = len(nd.log_text())
        restart_caught_up(c, cl, victim, "open_dir: allowed")
        c.check("data dir is group or world accessible" in
                nd.log_text()[log_before:], "open_dir: allowed with a warning")
        cl.stop(victim)
        with open(nd.config, "w") as f:
            f.write(text)
        os.chmod(nd.data_dir, 0o700)
        restart_caught_up(c, cl, victim, "open_dir: private again")

        c.step("modes: every data dir 0700, every file 0600")
        for i in sorted(cl.nodes):
            cl.stop(i)
        for i in sorted(cl.nodes):
            root = cl.nodes[i].data_dir
            mode = stat.S_IMODE(os.stat(root).st_mode)
            c.check(mode == 0o700, "node %d data dir mode 0700" % i,
                    "%o" % mode)
            bad = []
            n = 0
            for d, _, files in os.walk(root):
                for f in files:
                    p = os.path.join(d, f)
                    m = stat.S_IMODE(os.lstat(p).st_mode)
                    n += 1
                    if m & 0o077:
                        bad.append("%s %o" % (os.path.relpath(p, root), m))
            c.check(n >= 5 and not bad,
                    "node %d: %d files, none group/world accessible" % (i, n),
                    bad[:10])


if __name__ == "__main__":
    h.run_test(main)
