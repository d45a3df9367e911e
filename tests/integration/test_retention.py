#!/usr/bin/env python3
"""Queue retention on three real nodes, through the CLI (docs/MESSAGES.md
"Retention"): drop-oldest by count and by bytes converges to the limit,
reject refuses a produce whole (TERN_EQUEUEFULL), max_age trims with real
time (retention_interval_ms 200), every node holds the same low watermark
(queue info against each node alone), also after a leader kill and a
restart of a node; a deleted and re-created queue starts empty with no
group offset; consume --from-time; a fetch below the low watermark names
the first offset; a group below it continues there and the CLI says so,
also with a tag filter (consume --group --tag).

Disk bound: with [node] log_segment_bytes 64K and [raft]
snapshot_threshold_bytes 64K (snapshot_trailing 16), producing 2.5 MiB
(2560 x 1 KiB in batches of 16, one batch at a time), 10x the queue's max_bytes of 256K,
keeps each node's data directory under a bound, checked in two parts
(bytes allocated on disk, printed per node):
  - index/ (commit-log segments, checkpoints, LMDB) <= INDEX_BOUND: the
    retained 256 KiB plus record overhead span at most 256K/64K + 1 = 5
    segments, plus the segment being written and one awaiting the next
    checkpoint: 7 x 64 KiB; checkpoints (metadata only) 64 KiB; LMDB's
    file, the pages its live rows and free lists touch, LMDB_BYTES. That
    is 2 MiB, below the 2.5 MiB produced: without retention the segments
    alone would hold all of it;
  - raft/ <= RAFT_BOUND: the open segments libraft preallocates (at most
    3 of RAFT_SEGMENT_BYTES), and the closed part: the snapshot threshold
    (64 KiB), 16 trailing entries of at most one 16-message batch (17 KiB)
    each, closed segments awaiting removal after the next snapshot and
    the two snapshots libraft keeps, at most RAFT_CLOSED_BYTES;
  - the whole directory <= the two plus the disk reserve file
    ([limits] reserve_disk_bytes, 32 MiB by default, preallocated once)
    and 64 KiB of small files (identity, raft metadata)."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

KIB = 1024
SEG = 64 * KIB
RAFT_SEGMENT_BYTES = 8 * 1024 * KIB  # libraft's default open segment size
LMDB_BYTES = 1536 * KIB
RAFT_CLOSED_BYTES = 2048 * KIB
RESERVE_BYTES = 32 * 1024 * KIB
INDEX_BOUND = 7 * SEG + 64 * KIB + LMDB_BYTES
RAFT_BOUND = 3 * RAFT_SEGMENT_BYTES + RAFT_CLOSED_BYTES


def info(cl, queue, node=None):
    return cl.queue_info(queue, node)


def produce(c, cl, queue, n, size=100, batch=10, expect_ok=True, window=8):
    r = cl.tern("produce", queue, "--count", n, "--size", size, "--batch",
                batch, "--window", window, timeout=120)
    if expect_ok:
        c.check(r.returncode == 0, "produce %d to %s" % (n, queue),
                r.stderr.strip()[-300:])
    return r


def converge(c, cl, queue, what, pred, timeout=15):
    got = h.poll(lambda: (lambda q: q if q and pred(q) else None)(
        info(cl, queue)), timeout, 0.2)
    c.check(got is not None, "%s: %s" % (queue, what), info(cl, queue))
    return got


def same_everywhere(c, cl, queues, nodes, label):
    """Each queue's (start, next, bytes) equal on every node alone."""
    for q in queues:
        def agree(q=q):
            vals = [info(cl, q, i) for i in nodes]
            keys = [(v["start_offset"], v["next_offset"], v["bytes"])
                    if v else None for v in vals]
            return keys if None not in keys and len(set(keys)) == 1 else None
        got = h.poll(agree, 20, 0.3)
        c.check(got is not None, "%s: %s's low watermark equal on nodes %s "
                "(%s)" % (label, q, nodes, got[0] if got else
                          [info(cl, q, i) for i in nodes]))


def disk_use(path):
    """Bytes allocated by the files under path, by top-level entry."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:
                continue
            top = os.path.relpath(root, path).split(os.sep)[0]
            out[top] = out.get(top, 0) + st.st_blocks * 512
            kind = "%s/*%s" % (top, os.path.splitext(f)[1])
            out.setdefault("files", {}).setdefault(kind, [0, 0])
            out["files"][kind][0] += 1
            out["files"][kind][1] += st.st_blocks * 512
    return out


def total(u):
    return sum(v for k, v in u.items() if k != "files")


def main(c):
    node = {"retention_interval_ms": 200, "log_segment_bytes": "64K"}
    raft = {"snapshot_threshold_bytes": "64K", "snapshot_trailing": 16}
    with h.Cluster(3, raft=raft, node=node) as cl:
        c.step("start 3 nodes (retention every 200 ms, 64 KiB segments)")
        leader = cl.start()
        ids = sorted(cl.nodes)

        c.step("drop-oldest by count and by bytes")
        cl.tern("queue", "create", "cnt", "--max-messages", 100, check=True)
        cl.tern("queue", "create", "byt", "--max-bytes", "64K", check=True)
        produce(c, cl, "cnt", 300)
        produce(c, cl, "byt", 200, size=KIB)
        converge(c, cl, "cnt", "100 messages retained, 200..300",
                 lambda q: q["messages"] == 100 and q["start_offset"] == 200
                 and q["next_offset"] == 300)
        converge(c, cl, "byt", "bytes at the limit (64 messages of 1 KiB)",
                 lambda q: q["bytes"] <= 64 * KIB and q["messages"] == 64)
        q = info(cl, "cnt")
        c.check(q and q["max_messages"] == 100 and q["max_bytes"] == 0 and
                q["overflow"] == "drop-oldest" and
                q["max_age_ms"] == 72 * 3600 * 1000,
                "cnt's settings: the given limit and the defaults", q)
        r = cl.tern("queue", "info", "cnt")
        c.check(r.returncode == 0 and "max age:\t72h" in r.stdout and
                "first offset:\t200" in r.stdout, "queue info text", r.stdout)

        c.step("reject: a produce past the limit is refused whole")
        cl.tern("queue", "create", "rej", "--max-messages", 5, "--overflow",
                "reject", check=True)
        produce(c, cl, "rej", 5)
        r = produce(c, cl, "rej", 3, batch=3, expect_ok=False)
        c.check(r.returncode != 0 and "queue full" in r.stderr,
                "the sixth message is refused: queue full",
                r.stderr.strip()[-300:])
        q = info(cl, "rej")
        c.check(q and q["next_offset"] == 5 and q["messages"] == 5,
                "nothing of the refused batch appended", q)
        cl.tern("queue", "update", "rej", "--overflow", "drop-oldest",
                check=True)
        produce(c, cl, "rej", 3, batch=3)
        converge(c, cl, "rej", "after update to drop-oldest: 3..8",
                 lambda q: q["start_offset"] == 3 and q["next_offset"] == 8
                 and q["overflow"] == "drop-oldest")

        c.step("a fetch below the low watermark names the first offset")
        r = cl.tern("consume", "cnt", "--offset", 0)
        c.check(r.returncode != 0 and "first offset 200" in r.stderr,
                "consume --offset 0 of cnt", r.stderr.strip()[-300:])

        c.step("a group below the low watermark continues there")
        cl.tern("queue", "create", "grp", "--max-messages", 10, check=True)
        produce(c, cl, "grp", 5)
        r = cl.tern("consume", "grp", "--group", "g", "--commit", "--max", 5)
        c.check(r.returncode == 0 and len(h.parse_consume(r.stdout)) == 5,
                "group g read and committed 5", r.stderr.strip()[-200:])
        produce(c, cl, "grp", 50)
        converge(c, cl, "grp", "trimmed to 45..55",
                 lambda q: q["start_offset"] == 45)
        r = cl.tern("consume", "grp", "--group", "g", "--commit")
        got = h.parse_consume(r.stdout)
        c.check(r.returncode == 0 and got and got[0][0] == 45 and
                len(got) == 10, "group g continues at 45 (%d messages)" %
                len(got), r.stdout[:200])
        want = ("tern: group g: 40 messages below the queue's first offset "
                "45 were trimmed before they were consumed")
        c.check(want in r.stderr, "the CLI reports the skip",
                r.stderr.strip()[-300:])
        r = cl.tern("consume", "grp", "--group", "g")
        c.check(r.returncode == 0 and "trimmed" not in r.stderr,
                "no report once the group is past it", r.stderr.strip())

        c.step("delete and re-create grp: empty, no group offset")
        cl.tern("queue", "delete", "grp", check=True)
        cl.tern("queue", "create", "grp", check=True)
        q = info(cl, "grp")
        c.check(q and q["start_offset"] == 0 and q["next_offset"] == 0,
                "re-created grp is empty", q)
        produce(c, cl, "grp", 3)
        r = cl.tern("consume", "grp", "--group", "g")
        got = h.parse_consume(r.stdout)
        c.check(r.returncode == 0 and [o for o, _ in got] == [0, 1, 2] and
                "trimmed" not in r.stderr,
                "group g starts over at 0 in the new queue", r.stdout[:200])

        c.step("consume --from-time")
        cl.tern("queue", "create", "tim", check=True)
        produce(c, cl, "tim", 5)
        time.sleep(1.2)
        t_ms = int(time.time() * 1000)
        time.sleep(0.3)
        produce(c, cl, "tim", 5)
        r = cl.tern("consume", "tim", "--from-time", t_ms)
        got = [o for o, _ in h.parse_consume(r.stdout)]
        c.check(r.returncode == 0 and got == [5, 6, 7, 8, 9],
                "from %d ms: offsets 5..9" % t_ms, r.stderr.strip()[-200:])
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_ms / 1000.0))
        iso += ".%03dZ" % (t_ms % 1000)
        r = cl.tern("consume", "tim", "--from-time", iso)
        got2 = [o for o, _ in h.parse_consume(r.stdout)]
        c.check(r.returncode == 0 and got2 == got, "from %s: the same" % iso,
                r.stderr.strip()[-200:])
        r = cl.tern("consume", "tim", "--from-time", "2000-01-01T00:00:00Z")
        c.check(r.returncode == 0 and len(h.parse_consume(r.stdout)) == 10,
                "from 2000: every message", r.stderr.strip()[-200:])

        c.step("max_age 2 s: trimmed by real time")
        cl.tern("queue", "create", "age", "--max-age", "2s", check=True)
        produce(c, cl, "age", 20)
        q = info(cl, "age")
        c.check(q and q["max_age_ms"] == 2000, "age's max_age is 2 s", q)
        converge(c, cl, "age", "every message aged out (start 20)",
                 lambda q: q["start_offset"] == 20 and q["messages"] == 0,
                 timeout=20)

        queues = ["cnt", "byt", "rej", "grp", "tim", "age"]
        same_everywhere(c, cl, queues, ids, "steady")

        c.step("kill the leader (node %d), produce, restart it" % leader)
        cl.kill(leader)
        new = cl.wait_leader(20, exclude=(leader,))
        c.info("new leader node %d" % new)
        produce(c, cl, "cnt", 50)
        converge(c, cl, "cnt", "still 100 messages, 250..350",
                 lambda q: q["start_offset"] == 250 and q["messages"] == 100)
        alive = [i for i in ids if i != leader]
        same_everywhere(c, cl, queues, alive, "after the leader kill")
        cl.start_node(leader)
        same_everywhere(c, cl, queues, ids, "after node %d restarted" %
                        leader)
        now = cl.wait_leader(20)
        other = [i for i in ids if i not in (leader, now)][0]
        c.step("restart node %d" % other)
        cl.restart(other)
        same_everywhere(c, cl, queues, ids, "after node %d restarted" % other)

        c.step("disk bound: 2.5 MiB into a queue of max_bytes 256K")
        for q in queues:
            cl.tern("queue", "delete", q, check=True)
        cl.tern("queue", "create", "big", "--max-bytes", "256K", check=True)
        # Pipelined (window 8): the leader batches requests into entries of
        # up to 128 KiB, so few entries carry many bytes; snapshots (and so
        # the freeing of segments) must still come by bytes.
        produce(c, cl, "big", 2560, size=KIB, batch=16, window=8)
        converge(c, cl, "big", "256 KiB retained",
                 lambda q: q["bytes"] <= 256 * KIB and q["messages"] == 256)
        bound = INDEX_BOUND + RAFT_BOUND + RESERVE_BYTES + 64 * KIB

        def fits(u):
            return (u.get("index", 0) <= INDEX_BOUND and
                    u.get("raft", 0) <= RAFT_BOUND and
                    total(u) <= bound)
        # Segments are freed when a snapshot (every 64 KiB of raft log)
        # meets a checkpoint past them: a few more small produces to the
        # capped queue drive the snapshots, as a live queue would.
        for rnd in range(12):
            if all(fits(disk_use(cl.nodes[i].data_dir)) for i in ids):
                break
            produce(c, cl, "big", 64, size=KIB, batch=16, window=1)
            time.sleep(0.5)
        c.info("%d more produces of 64 KiB" % rnd)
        for i in ids:
            nd = cl.nodes[i]
            got = h.poll(lambda nd=nd: (lambda u: u if fits(u) else None)(
                disk_use(nd.data_dir)), 10, 0.5)
            u = got or disk_use(nd.data_dir)
            c.check(got is not None,
                    "node %d: index/ %d <= %d, raft/ %d <= %d, all %d <= %d"
                    % (i, u.get("index", 0), INDEX_BOUND, u.get("raft", 0),
                       RAFT_BOUND, total(u), bound),
                    ", ".join("%s: %d files %d bytes" % (k, n, b) for k, (n, b)
                              in sorted(u["files"].items())))

        c.step("a group below the low watermark, with a tag filter")
        cl.tern("queue", "create", "tgq", "--max-messages", 10, check=True)
        for n in (5, 50):
            r = cl.tern("produce", "tgq", "--count", n, "--size", 100,
                        "--batch", 10, "--tag", "t", timeout=120)
            c.check(r.returncode == 0, "produce %d tagged t" % n,
                    r.stderr.strip()[-300:])
            if n == 5:
                r = cl.tern("consume", "tgq", "--group", "g", "--tag", "t",
                            "--commit", "--max", 5)
                c.check(r.returncode == 0 and
                        len(h.parse_consume(r.stdout)) == 5,
                        "group g read and committed 5 tagged t",
                        r.stderr.strip()[-200:])
        converge(c, cl, "tgq", "trimmed to 45..55",
                 lambda q: q["start_offset"] == 45)
        r = cl.tern("consume", "tgq", "--group", "g", "--tag", "t", "--commit")
        got = h.parse_consume(r.stdout)
        c.check(r.returncode == 0 and got and got[0][0] == 45 and
                len(got) == 10, "consume --group g --tag t continues at 45 "
                "(%d messages)" % len(got), r.stdout[:200])
        want = ("tern: group g: 40 messages below the queue's first offset "
                "45 were trimmed before they were consumed")
        c.check(want in r.stderr, "the CLI reports the skip with --tag",
                r.stderr.strip()[-300:])


if __name__ == "__main__":
    h.run_test(main)
