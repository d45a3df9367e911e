#!/usr/bin/env python3
"""(f) full disk: each node's data dir is its own 64 MiB tmpfs,
[limits] min_free_disk_bytes = 16M and reserve_disk_bytes = 8M (a fresh
node uses ~24 MiB: raft_uv preallocates its segments; node/disk.c keeps the
reserve as DATA_DIR/disk-reserve).
1. After a balloon file leaves 10 MiB free on every node, produce is
   rejected with a clear "disk full" error, the nodes keep running and give
   their reserve back; once the balloons are deleted, the reserves come back,
   produce succeeds again and every acknowledged id is readable.
2. Jepsen F5: the leader's tmpfs is filled to the last byte. The leader must
   not fail-stop (it used to, at its next apply): it refuses writes, hands
   leadership to a node with space, and the cluster takes writes again while
   the balloon is still there; after it is deleted the old leader catches up
   and holds every acknowledged id.
Exit 77 (skip) when tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

SIZE = "64m"
MIN_FREE = 16 << 20
RESERVE = 8 << 20
LEAVE_FREE = 10 << 20


def mount_tmpfs(path):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + SIZE,
                        "tern-it-tmpfs", path], capture_output=True,
                       text=True)
    return r.returncode == 0, r.stderr.strip()


def umount(path):
    r = subprocess.run(["umount", path], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", path], capture_output=True)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def inflate(path, leave):
    """Write a balloon file so that about `leave` bytes stay free (0: until
    ENOSPC, bounded by the fs size)."""
    balloon = os.path.join(path, "balloon")
    need = free_bytes(path) - leave if leave else 1 << 40
    limit = 256 << 20
    chunk = b"\0" * (1 << 20)
    with open(balloon, "wb", buffering=0) as f:
        while need > 0 and limit > 0:
            n = min(need, len(chunk))
            try:
                w = f.write(chunk[:n])
            except OSError:
                break  # ENOSPC: full
            need -= w
            limit -= w
        try:
            os.fsync(f.fileno())
        except OSError:
            pass
    return balloon


def reserve_size(data_dir):
    try:
        return os.stat(os.path.join(data_dir, "disk-reserve")).st_size
    except FileNotFoundError:
        return -1


def produce_one(cl, prefix, timeout_ms=2000):
    return cl.tern("produce", "full", "--count", 1, "--size", 1024,
                   "--id-prefix", prefix, timeout_ms=timeout_ms, timeout=20)


def main(c):
    root = tempfile.mkdtemp(prefix="tern-it-disk-")
    mounts = []
    try:
        for i in (1, 2, 3):
            mp = os.path.join(root, "node%d" % i)
            os.makedirs(mp)
            ok, err = mount_tmpfs(mp)
            if not ok:
                raise h.Skip("cannot mount tmpfs: %s" % err)
            mounts.append(mp)
        run(c, mounts)
    finally:
        for c_ in list(h._live_clusters):
            c_.close()  # nodes must be gone before the unmount
        for mp in mounts:
            umount(mp)
        shutil.rmtree(root, ignore_errors=True)


def run(c, mounts):
    dirs = {i + 1: os.path.join(mp, "data") for i, mp in enumerate(mounts)}
    with h.Cluster(3, limits={"min_free_disk_bytes": MIN_FREE,
                              "reserve_disk_bytes": RESERVE},
                   data_dirs=dirs) as cl:
        c.step("start 3 nodes, each on a %s tmpfs, min_free_disk_bytes %d, "
               "reserve_disk_bytes %d" % (SIZE, MIN_FREE, RESERVE))
        cl.start()
        for i, d in dirs.items():
            c.check(reserve_size(d) == RESERVE,
                    "node %d allocated its %d-byte reserve" % (i, RESERVE),
                    reserve_size(d))
        for mp in mounts:
            c.info("%s: %.1f MiB free after start" %
                   (mp, free_bytes(mp) / 2**20))
        cl.tern("queue", "create", "full", check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", "full", "--count", 200, "--size", 1024,
                    "--ack-log", acks, "--id-prefix", "pre")
        c.check(r.returncode == 0, "produce 200 with space available",
                r.stderr.strip()[-300:])

        c.step("fill every tmpfs to %d MiB free" % (LEAVE_FREE >> 20))
        balloons = [inflate(mp, LEAVE_FREE) for mp in mounts]
        for mp in mounts:
            c.info("%s: %.1f MiB free" % (mp, free_bytes(mp) / 2**20))
        last = [None]

        def rejected():
            r = produce_one(cl, "full")
            last[0] = r
            return r.returncode != 0 and "disk full" in r.stderr.lower()
        c.check(h.poll(rejected, 15, interval=0.5),
                "produce rejected with a 'disk full' error",
                last[0] and "rc=%d stderr=%r" % (last[0].returncode,
                                                 last[0].stderr.strip()))
        if last[0] is not None:
            c.info("error shown: %s" % last[0].stderr.strip()[-200:])
        r = cl.tern("consume", "full", "--offset", 0)
        c.check(r.returncode == 0 and
                len(h.parse_consume(r.stdout)) >= 200,
                "reads still work while full", r.stderr.strip()[-200:])
        for i, nd in cl.nodes.items():
            c.check(nd.alive(), "node %d still running while full" % i)
        for i, d in dirs.items():
            # Each node polls its own free space every 100 ms.
            c.check(h.poll(lambda: reserve_size(d) == -1, 5),
                    "node %d gave its reserve back" % i)

        c.step("delete the balloons")
        for b in balloons:
            os.unlink(b)
        t0 = time.monotonic()
        c.check(h.poll(lambda: produce_one(cl, "after").returncode == 0,
                       20, interval=0.5),
                "produce succeeds again after space is freed")
        c.info("recovered after %.1f s" % (time.monotonic() - t0))
        acks2 = os.path.join(cl.dir, "acks2.txt")
        r = cl.tern("produce", "full", "--count", 200, "--size", 1024,
                    "--ack-log", acks2, "--id-prefix", "post")
        c.check(r.returncode == 0, "produce 200 more",
                r.stderr.strip()[-300:])
        c.check(h.poll(lambda: all(reserve_size(d) == RESERVE
                                   for d in dirs.values()), 10),
                "every node allocated its reserve again",
                {i: reserve_size(d) for i, d in dirs.items()})
        acked = h.read_ack_log(acks) + h.read_ack_log(acks2)
        got = cl.consume_all("full", expect=len(acked))
        ids = {g[1] for g in got}
        missing = [a for a in acked if a[0] not in ids]
        c.check(not missing, "all %d acknowledged ids readable" %
                len(acked), missing[:5])

        fill_leader_to_zero(c, cl, dirs, mounts, acked)


def fill_leader_to_zero(c, cl, dirs, mounts, acked):
    lead = cl.wait_leader()
    c.step("F5: fill leader node %d's tmpfs to the last byte" % lead)
    pid = cl.nodes[lead].pid
    balloon = inflate(mounts[lead - 1], 0)
    c.info("node %d: %d bytes free" % (lead, free_bytes(mounts[lead - 1])))
    new = [None]

    def moved():
        r = produce_one(cl, "moved")
        st = cl.leader()
        new[0] = st
        return r.returncode == 0 and st is not None and st != lead
    c.check(h.poll(moved, 20, interval=0.5),
            "writes accepted again, by a node with space, while node %d "
            "is full" % lead, "leader now %r" % new[0])
    c.check(cl.nodes[lead].alive() and cl.nodes[lead].pid == pid,
            "node %d did not fail-stop (same process)" % lead)
    c.check("disk full" in cl.nodes[lead].log_text(),
            "node %d logged its disk alarm" % lead)
    c.check("raft replica fail-stopped" not in cl.nodes[lead].log_text(),
            "no fail-stop in node %d's log" % lead)
    acks3 = os.path.join(cl.dir, "acks3.txt")
    r = cl.tern("produce", "full", "--count", 200, "--size", 1024,
                "--ack-log", acks3, "--id-prefix", "f5")
    c.check(r.returncode == 0, "produce 200 while node %d is full" % lead,
            r.stderr.strip()[-300:])
    c.check(cl.nodes[lead].alive() and cl.nodes[lead].pid == pid,
            "node %d still the same process after 200 more" % lead)

    c.step("delete node %d's balloon; it catches up" % lead)
    os.unlink(balloon)
    acked = acked + h.read_ack_log(acks3)
    ids = set()

    def caught_up():
        r = cl.tern("--read-from", "first", "consume", "full", "--offset", 0,
                    servers=[lead], timeout=20)
        ids.clear()
        ids.update(g[1] for g in h.parse_consume(r.stdout))
        return all(a[0] in ids for a in acked)
    h.poll(caught_up, 30, interval=0.5)
    missing = [a for a in acked if a[0] not in ids]
    c.check(not missing, "node %d holds all %d acknowledged ids" %
            (lead, len(acked)), missing[:5])
    for i, nd in cl.nodes.items():
        c.check(nd.alive(), "node %d running at the end" % i)


if __name__ == "__main__":
    h.run_test(main)
