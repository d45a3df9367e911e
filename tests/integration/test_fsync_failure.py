#!/usr/bin/env python3
"""(k) a failed fsync is fatal, never retried (fsyncgate). Node 3 runs under
jepsen/powerloss's LD_PRELOAD shim, whose fail-fsync file makes the next
fsync of a matching file return EIO. With a small snapshot threshold every
snapshot syncs the commit log and LMDB (idx_sync). Once the fault is armed
for the commit log, node 3 must exit 1 naming the failed sync instead of
logging "snapshot failed" and carrying on (a retried fsync can succeed after
Linux dropped the pages, and a later snapshot would then compact the raft
log over data that never reached the disk). Restarted without the fault,
node 3 must hold every acknowledged message. Exit 77 (skip) when the shim
cannot be built (no C compiler or liblmdb-dev)."""
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build_shim(out):
    env = dict(os.environ)
    env.pop("CFLAGS", None)
    r = subprocess.run(["make", "-s", "-C",
                        os.path.join(REPO, "jepsen", "powerloss"),
                        "OUT=" + out], capture_output=True, text=True,
                       env=env, timeout=120)
    if r.returncode != 0:
        raise h.Skip("cannot build the power-loss shim: %s"
                     % r.stderr.strip()[-300:])
    return os.path.join(out, "libtern_powerloss.so")


def main(c):
    so = build_shim(h.scratch_dir("tern-it-shim-"))
    raft = {"snapshot_threshold_bytes": 32768, "snapshot_trailing": 16}
    with h.Cluster(3, raft=raft) as cl:
        nd = cl.nodes[3]
        state = os.path.join(cl.dir, "node3-powerloss")
        os.makedirs(state)
        nd.env = {"LD_PRELOAD": so, "TERN_POWERLOSS_DIR": state,
                  "TERN_POWERLOSS_ROOT": nd.data_dir,
                  # The shim is preloaded before an ASan runtime.
                  "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:"
                                  "verify_asan_link_order=0"}
        c.step("start 3 nodes, node 3 under the power-loss shim")
        cl.start()
        cl.tern("queue", "create", "fs", check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", "fs", "--count", 300, "--size", 1024,
                    "--ack-log", acks, "--id-prefix", "pre")
        c.check(r.returncode == 0, "produce 300 before the fault",
                r.stderr.strip()[-300:])
        c.check(nd.alive(), "node 3 runs under the shim")

        c.step("arm: the next fsync of node 3's commit log fails with EIO")
        with open(os.path.join(state, "fail-fsync"), "w") as fh:
            fh.write("index/log")
        acks2 = os.path.join(cl.dir, "acks2.txt")
        # Enough bytes for several snapshots; the producer does not stop
        # when node 3 dies (two nodes are a majority).
        r = cl.tern("produce", "fs", "--count", 600, "--size", 1024,
                    "--ack-log", acks2, "--id-prefix", "post")
        c.check(r.returncode == 0, "produce 600 more (a majority is left)",
                r.stderr.strip()[-300:])
        c.check(h.poll(lambda: not nd.alive(), 20, interval=0.1)
                is not None, "node 3 stops after the failed fsync")
        rc = nd.proc.returncode if nd.proc else None
        c.check(rc == 1, "node 3 exit status 1", "rc=%r" % rc)
        log = nd.log_text()
        c.check("sync failed" in log, "node 3's log names the failed sync",
                log[-600:])
        c.check("snapshot failed" not in log or "exiting" in log,
                "no snapshot failure it carried on from", log[-600:])

        c.step("restart node 3 without the fault")
        armed = os.path.join(state, "fail-fsync")
        if os.path.exists(armed):  # the shim fires once and removes it
            os.unlink(armed)
        cl.start_node(3)
        lid = cl.wait_leader()
        st = cl.status(lid)
        c.check(st is not None and cl.wait_applied(3, st["commit_index"]),
                "node 3 catches up with the leader's commit index")
        acked = h.read_ack_log(acks) + h.read_ack_log(acks2)
        got = cl.consume_all("fs", servers=cl.servers([3]),
                             expect=len(acked))
        h.check_acked_readable(c, "node 3", got, acked)
        c.check(nd.alive(), "node 3 keeps running after the restart")


if __name__ == "__main__":
    h.run_test(main)
