#!/usr/bin/env python3
"""Unreadable sectors in a stopped follower's raft log: the disk answers
EIO where a segment's records lie (eio_fs.py: the segment's bytes served
by a FUSE file system that fails reads of its second 4 KiB block, bound
over the segment file). Each store
(`[raft] log_store` uv and tern) must refuse the start with a clear error
that names the file and the I/O error, exit non-zero rather than die by a
signal (a mapped file read past a failed page raises SIGBUS), and never
serve; the other two nodes keep every acknowledged message. An EIO is not
damage the node may repair by itself (a failing disk): it is not taken
for a corrupt log, so no rejoin moves the directory aside.

Exit 77 (skip) without root or /dev/fuse."""
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import eio_fs  # noqa: E402

QUEUE = "eio"
N_MSGS = 600
MSG_SIZE = 300
VICTIM = 3
BAD = (4096, 8192)  # the segment's second 4 KiB block answers EIO


def mount_bind(src, dst):
    r = subprocess.run(["mount", "--bind", src, dst], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("mount --bind: %s" % r.stderr.strip())


def umount(path):
    if subprocess.run(["umount", path], capture_output=True,
                      timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", path], capture_output=True,
                       timeout=30)


def pick_segment(store, raft_dir):
    """A segment whose second block holds records: raft_uv's largest
    segment (closed START-END or open-N), tern's oldest seg-N of more than
    two blocks that is not the newest."""
    names = sorted(os.listdir(raft_dir))

    def size(n):
        return os.path.getsize(os.path.join(raft_dir, n))
    if store == "uv":
        segs = [n for n in names
                if re.fullmatch(r"\d{16}-\d{16}|open-\d+", n)
                and size(n) > BAD[1]]
        segs.sort(key=size, reverse=True)
    else:
        segs = [n for n in names if n.startswith("seg-")]
        segs = [n for n in segs[:-1] if size(n) > BAD[1]]
    return os.path.join(raft_dir, segs[0]) if segs else None


def run_store(c, store, scratch):
    holder = {}
    try:
        one_store(c, store, scratch, holder)
    finally:
        release(holder)


def release(holder):
    """Undo the bind mount, then the FUSE mount (idempotent)."""
    if holder.pop("bound", None):
        umount(holder["seg"])
    fs = holder.pop("fs", None)
    if fs is not None:
        fs.close()


def one_store(c, store, scratch, holder):
    raft = {"log_store": store}
    if store == "tern":
        raft["segment_bytes"] = "64K"
    with h.Cluster(3, raft=raft) as cl:
        try:
            data = cl.nodes[VICTIM].data_dir
            c.step("%s: 3 nodes, produce %d" % (store, N_MSGS))
            leader = cl.start()
            cl.tern("queue", "create", QUEUE, check=True)
            acks = os.path.join(cl.dir, "acks.txt")
            r = cl.tern("produce", QUEUE, "--count", N_MSGS, "--size",
                        MSG_SIZE, "--batch", 4, "--ack-log", acks,
                        "--id-prefix", "m")
            c.check(r.returncode == 0, "%s: produce exit 0" % store,
                     r.stderr.strip()[-300:])
            acked = h.read_ack_log(acks)
            leader = cl.wait_leader(20)
            target = (cl.status(leader) or {}).get("last_applied") or 0
            c.check(cl.wait_applied(VICTIM, target, 30),
                    "%s: node %d caught up" % (store, VICTIM))

            c.step("%s: stop node %d, make one block of a segment unreadable"
                   % (store, VICTIM))
            c.check(cl.stop(VICTIM) == 0, "%s: node %d exited 0" %
                    (store, VICTIM))
            seg = pick_segment(store, os.path.join(data, "raft"))
            c.check(seg is not None, "%s: a segment with records in its "
                    "second block" % store, sorted(os.listdir(
                        os.path.join(data, "raft"))))
            if seg is None:
                return
            nd = cl.nodes[VICTIM]
            with open(seg, "rb") as f:
                image = f.read()
            fmnt = os.path.join(scratch, "fuse")
            os.makedirs(fmnt)
            holder["fs"] = eio_fs.EioFile(fmnt, "seg", image, [BAD])
            holder["seg"], holder["bound"] = seg, True  # before: a deadline
            mount_bind(os.path.join(fmnt, "seg"), seg)
            c.info("%s: %s (%d bytes) now reads EIO in [%d, %d)" %
                   (store, os.path.basename(seg), len(image), BAD[0], BAD[1]))
            with open(seg, "rb") as f:
                f.seek(BAD[0])
                try:
                    f.read(4096)
                    readable = True
                except OSError:
                    readable = False
            c.check(not readable, "%s: reading that block fails" % store)

            c.step("%s: restart node %d: refused, with the file named" %
                   (store, VICTIM))
            log_before = len(nd.log_text())
            cl.start_node_load_failure(VICTIM)
            st = h.poll(lambda: cl.status(VICTIM) or
                        (not nd.alive() and "exited"), 20, interval=0.2)
            log = nd.log_text()[log_before:]
            c.check(st == "exited", "%s: node %d never answered" %
                    (store, VICTIM), st)
            rc = nd.proc.returncode if nd.proc else None
            c.check(rc is not None and rc > 0, "%s: exit code non-zero, not a "
                    "signal (%s)" % (store, rc), log[-600:])
            c.check(os.path.basename(seg) in log, "%s: the log names %s" %
                    (store, os.path.basename(seg)), log[-600:])
            c.check("err=EIO" in log, "%s: the log names the I/O error (EIO)" %
                    store, log[-600:])
            c.check(os.path.exists(seg), "%s: the segment stays where it was "
                    "(no rejoin on an I/O error)" % store)

            c.step("%s: the other two keep every acknowledged message" % store)
            leader = cl.wait_leader(20, exclude=(VICTIM,))
            got = cl.consume_all(QUEUE, servers=cl.nodes[leader].client_addr,
                                 expect=len(acked))
            h.check_acked_readable(c, "%s: leader %d" % (store, leader), got,
                                   acked)
            cl.kill(VICTIM)
        finally:
            release(holder)  # before the cluster's files are removed


def main(c):
    if os.geteuid() != 0:
        raise h.Skip("needs root (mount)")
    if not os.path.exists("/dev/fuse"):
        raise h.Skip("no /dev/fuse")
    scratch = h.scratch_dir("tern-it-eio-")
    for store in sys.argv[1:] or ("uv", "tern"):
        run_store(c, store, os.path.join(scratch, store))


if __name__ == "__main__":
    h.run_test(main)
