#!/usr/bin/env python3
"""Single active consumer takeover on 3 nodes (docs/WORKQUEUES.md): while
consumer A holds a stream group's claim, B's claim is refused and its
group fetch gets TERN_EBUSY; A's connection closes -> B is granted at
once; a consumer that stops renewing (SIGSTOP) is taken over only after
its lease lapsed, and its later commit never moves the group's offset."""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

LEASE = "2s"


def waiting_line(text):
    """(holder, until_ms) of the first "waiting:" line, or None."""
    for line in text.splitlines():
        p = line.split()
        if len(p) >= 8 and p[0] == "waiting:":
            return int(p[5]), int(p[7])
    return None


def offsets(text):
    return [int(l.split("\t")[0]) for l in text.splitlines()
            if "\t" in l and l.split("\t")[0].isdigit()]


def wait_lines(path, n, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        with open(path) as f:
            if len(offsets(f.read())) >= n:
                return True
        time.sleep(0.1)
    return False


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        c.check(leader in cl.nodes, "writable leader elected")
        r = cl.tern("queue", "create", "events")
        c.check(r.returncode == 0, "queue create", r.stderr.strip())
        r = cl.tern("produce", "events", "--count", 50, "--size", 16,
                    "--id-prefix", "e", timeout=120)
        c.check(r.returncode == 0, "produce 50", r.stderr.strip()[-300:])

        c.step("A holds the group; B is refused")
        out_a = os.path.join(cl.dir, "a.txt")
        fa = open(out_a, "w")
        pa = cl.tern_popen("consume", "events", "--group", "g",
                           "--exclusive", "--lease", LEASE, "--follow",
                           stdout=fa)
        c.check(wait_lines(out_a, 50), "A consumed the 50 messages")
        r = cl.tern("consume", "events", "--group", "g", "--exclusive",
                    "--lease", LEASE, "--wait", "1s", timeout=60)
        w = waiting_line(r.stdout)
        c.check(r.returncode != 0 and w is not None,
                "B's claim is refused with a waiting line", r.stdout.strip())
        r = cl.tern("consume", "events", "--group", "g", "--max", 1,
                    timeout=60)
        c.check(r.returncode != 0 and "held by consumer" in r.stderr,
                "B's group fetch is refused (EBUSY)", r.stderr.strip())

        c.step("A exits: B is granted at once")
        pa.terminate()
        pa.wait(timeout=30)
        fa.close()
        r = cl.tern("produce", "events", "--count", 5, "--size", 16,
                    "--id-prefix", "f", timeout=120)
        c.check(r.returncode == 0, "produce 5 more")
        t0 = time.time()
        r = cl.tern("consume", "events", "--group", "g", "--exclusive",
                    "--lease", LEASE, "--wait", "1s", "--max", 5, timeout=60)
        c.check(r.returncode == 0 and offsets(r.stdout) == list(range(50, 55)),
                "B granted within 1 s of A's exit, reads 50..54",
                (r.returncode, r.stdout.strip(), r.stderr.strip()))
        c.info("B granted after %.2f s" % (time.time() - t0))

        c.step("a stuck holder is taken over only after its lease lapsed")
        r = cl.tern("produce", "events", "--count", 5, "--size", 16,
                    "--id-prefix", "s", timeout=120)
        out_b = os.path.join(cl.dir, "b.txt")
        fb = open(out_b, "w")
        pb = cl.tern_popen("consume", "events", "--group", "g",
                           "--exclusive", "--lease", LEASE, "--follow",
                           stdout=fb)
        c.check(wait_lines(out_b, 5), "B2 consumed 55..59")
        pb.send_signal(signal.SIGSTOP)
        stopped = time.time() * 1000
        r = cl.tern("produce", "events", "--count", 3, "--size", 16,
                    "--id-prefix", "t", timeout=120)
        c.check(r.returncode == 0, "produce 3 more (60..62)")
        r = cl.tern("consume", "events", "--group", "g", "--exclusive",
                    "--lease", LEASE, "--wait", "20s", "--max", 1,
                    "--follow", timeout=60)
        granted = time.time() * 1000
        w = waiting_line(r.stdout)
        c.check(w is not None, "C waited first", r.stdout.strip())
        if w is not None:
            c.check(granted >= w[1] - 50,
                    "C was granted only after the holder's until",
                    (granted, w[1]))
            c.check(w[1] <= stopped + 2000 + 1000,
                    "the holder's until is within one lease of the stop",
                    (w[1], stopped))
        c.check(offsets(r.stdout) == [60], "C read offset 60",
                r.stdout.strip())
        pb.send_signal(signal.SIGCONT)
        time.sleep(3)
        pb.kill()
        pb.wait(timeout=30)
        fb.close()
        r = cl.tern("consume", "events", "--group", "g", "--max", 10,
                    timeout=60)
        got = offsets(r.stdout)
        c.check(r.returncode == 0 and got == [61, 62],
                "the group's offset is C's commit: the old holder, woken "
                "after the takeover, moved nothing", (got, r.stderr.strip()))
        c.check(pa.returncode is not None, "A exited")


if __name__ == "__main__":
    h.run_test(main)
