#!/usr/bin/env python3
"""Single active consumer takeover on 3 nodes (docs/WORKQUEUES.md): while
consumer A holds a stream group's claim, B's claim is refused and its
group fetch gets TERN_ECLAIMED; A's connection closes -> B is granted at
once; a consumer that stops renewing (SIGSTOP) is taken over only after
its lease lapsed, and when it wakes while the new holder consumes it
prints nothing more and its commits never move the group's offset; a
leader kill keeps the claim (the holder goes on through the new leader,
others still wait)."""
import json
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
        if len(p) >= 9 and p[0] == "waiting:":
            return int(p[6]), int(p[8])
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
                "B's group fetch is refused (TERN_ECLAIMED)", r.stderr.strip())

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
        out_c = os.path.join(cl.dir, "c.txt")
        fc = open(out_c, "w")
        pc = cl.tern_popen("consume", "events", "--group", "g", "--exclusive",
                           "--lease", LEASE, "--wait", "20s", "--follow",
                           stdout=fc)
        c.check(wait_lines(out_c, 3), "C waited, then read 60..62")
        granted = time.time() * 1000
        with open(out_c) as f:
            text_c = f.read()
        w = waiting_line(text_c)
        c.check(w is not None, "C waited first", text_c.strip())
        if w is not None:
            c.check(granted >= w[1] - 50,
                    "C was granted only after the holder's until",
                    (granted, w[1]))
            c.check(w[1] <= stopped + 2000 + 1000,
                    "the holder's until is within one lease of the stop",
                    (w[1], stopped))
        c.check(offsets(text_c) == [60, 61, 62], "C read 60..62",
                text_c.strip())

        c.step("the old holder wakes while C holds: it moves nothing")
        pb.send_signal(signal.SIGCONT)
        time.sleep(3)
        r = cl.tern("produce", "events", "--count", 3, "--size", 16,
                    "--id-prefix", "u", timeout=120)
        c.check(r.returncode == 0, "produce 3 more (63..65)")
        c.check(wait_lines(out_c, 6), "C read 63..65")
        pb.kill()
        pb.wait(timeout=30)
        fb.close()
        with open(out_b) as f:
            got_b = offsets(f.read())
        c.check(got_b == list(range(55, 60)),
                "the woken holder read nothing more", got_b)
        pc.terminate()
        pc.wait(timeout=30)
        fc.close()
        with open(out_c) as f:
            got_c = offsets(f.read())
        c.check(got_c == list(range(60, 66)), "C read 60..65 once", got_c)
        r = cl.tern("consume", "events", "--group", "g", "--max", 10,
                    timeout=60)
        got = offsets(r.stdout)
        c.check(r.returncode == 0 and got == [],
                "the group's offset is C's last commit (66): no stale "
                "commit of the old holder moved it back",
                (got, r.stderr.strip()))
        c.check(pa.returncode is not None, "A exited")

        c.step("a leader kill keeps the claim: the holder goes on, others "
               "still wait")
        out_d = os.path.join(cl.dir, "d.txt")
        fd = open(out_d, "w")
        pd = cl.tern_popen("consume", "events", "--group", "g", "--exclusive",
                           "--lease", LEASE, "--follow", stdout=fd)
        r = cl.tern("produce", "events", "--count", 2, "--size", 16,
                    "--id-prefix", "v", timeout=120)
        c.check(r.returncode == 0 and wait_lines(out_d, 2),
                "D holds the group and read 66..67")
        r = cl.tern("group", "status", "events", "g", "--json", timeout=60)
        st = json.loads(r.stdout.splitlines()[0]) if r.returncode == 0 and \
            r.stdout.strip() else {}
        c.check(st.get("mode") == "stream" and st.get("claim_holder", 0) != 0
                and st.get("claim_until_ms", 0) > time.time() * 1000 - 5000,
                "group status names D as the claim holder", r.stdout.strip())
        old = cl.leader()
        cl.kill(old)
        new = cl.wait_leader(20, exclude=(old,))
        c.info("leader %s killed, new leader %s" % (old, new))
        r = cl.tern("produce", "events", "--count", 2, "--size", 16,
                    "--id-prefix", "w", timeout=120)
        c.check(r.returncode == 0 and wait_lines(out_d, 4),
                "D read 68..69 through the new leader")
        r = cl.tern("consume", "events", "--group", "g", "--exclusive",
                    "--lease", LEASE, "--wait", "1s", timeout=60)
        c.check(r.returncode != 0 and waiting_line(r.stdout) is not None,
                "E's claim is still refused after the failover",
                r.stdout.strip())
        pd.terminate()
        pd.wait(timeout=30)
        fd.close()
        with open(out_d) as f:
            got_d = offsets(f.read())
        c.check(got_d == list(range(66, 70)), "D read 66..69 once", got_d)


if __name__ == "__main__":
    h.run_test(main)
