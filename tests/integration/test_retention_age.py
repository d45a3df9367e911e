#!/usr/bin/env python3
"""Retention by age on three real nodes whose wall clocks are moved by the
clockshift LD_PRELOAD shim (tests/integration/clockshift/), as
docs/MESSAGES.md ("Time", "Retention") says:

  - the shim itself: CLOCK_REALTIME and CLOCK_REALTIME_COARSE shifted,
    CLOCK_MONOTONIC and time() not, a garbled or missing file is 0, a
    rewritten file is seen while the process runs;
  - queue dflt (no flags: max_age 72 h) and hour (--max-age 1h): every
    clock +2 h trims hour entirely and leaves dflt whole; +71 h dflt still
    whole; +73 h dflt trimmed (and a node restarted at +73 h rejoins over
    peer TLS); messages produced after that are kept;
  - the leader's clock steps back 10 h while producing: append times stay
    monotone (consume --json, message trace), nothing trimmed comes back,
    nothing is trimmed early;
  - one follower at +100 h, the others at +0: it trims nothing by itself
    (the same low watermark on every node alone); made leader, its clock
    decides the trims, still the same low watermark on every node.

A "tick" queue with max_age 1 s shows that a retention pass ran with the
clocks as set: once a tick message is trimmed, the pass that trimmed it
(or an earlier one since the clocks were set) also looked at every other
queue, which sort before "tick" in the same page."""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

HOUR = 3600 * 1000
CLOCK_REALTIME_COARSE = 5  # Linux; Python's time module does not name it

PROBE = r"""
import ctypes, json, sys, time
libc = ctypes.CDLL(None)
libc.time.restype = ctypes.c_long
out = {"real": time.time(),
       "coarse": time.clock_gettime(%d),
       "mono": time.monotonic(),
       "libc_time": libc.time(None)}
print(json.dumps(out))
""" % CLOCK_REALTIME_COARSE


def probe(lib, clock_file, script=PROBE):
    env = dict(os.environ, LD_PRELOAD=lib, TERN_CLOCKSHIFT_FILE=clock_file)
    env.pop("ASAN_OPTIONS", None)
    r = subprocess.run([sys.executable, "-c", script], env=env,
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("clock probe failed: %s" % r.stderr[-300:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_shim(c, lib):
    c.step("the clock shim alone (a Python probe preloaded with it)")
    d = tempfile.mkdtemp(prefix="tern-it-clock-")
    path = os.path.join(d, "clock")

    def shifted(text):
        if text is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            with open(path, "w") as f:
                f.write(text)
        t0 = time.time()
        p = probe(lib, path)
        return p, p["real"] - t0, p["coarse"] - t0, p["libc_time"] - t0

    p, real, coarse, libc = shifted("%d\n" % (2 * HOUR))
    c.check(7190 < real < 7210 and 7190 < coarse < 7210,
            "+2 h: CLOCK_REALTIME and _COARSE 2 h ahead", (real, coarse))
    c.check(-10 < libc < 10, "+2 h: time() not shifted", libc)
    c.check(abs(p["mono"] - time.monotonic()) < 10,
            "+2 h: CLOCK_MONOTONIC not shifted",
            (p["mono"], time.monotonic()))
    _, real, _, _ = shifted(" -36000000 ")
    c.check(-36010 < real < -35990, "-10 h with spaces: 10 h behind", real)
    for bad in ("12x", "", "--5", "1.5", "9" * 40, None):
        _, real, coarse, _ = shifted(bad)
        c.check(-10 < real < 10 and -10 < coarse < 10,
                "file %r: offset 0" % (bad,), (real, coarse))
    # One process, the file rewritten while it runs: the new offset shows
    # within the re-read period (polled, bounded).
    with open(path, "w") as f:
        f.write("0")
    moving = r"""
import json, os, time
path = %r
before = time.time() - time.monotonic()
tmp = path + ".tmp"
with open(tmp, "w") as f:
    f.write("3600000")
os.replace(tmp, path)
for _ in range(400):
    d = time.time() - time.monotonic()
    if d - before > 3000:
        break
    time.sleep(0.01)
print(json.dumps({"jump": d - before}))
""" % path
    got = probe(lib, path, moving)
    c.check(3590 < got["jump"] < 3610,
            "a rewritten file moves the running process's clock by 1 h",
            got)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def info(cl, queue, node=None):
    return cl.queue_info(queue, node)


def produce(c, cl, queue, n, servers=None):
    r = cl.tern("produce", queue, "--count", n, "--size", 64, "--batch", 5,
                servers=servers, timeout=120)
    c.check(r.returncode == 0, "produce %d to %s" % (n, queue),
            r.stderr.strip()[-300:])


def window(q):
    return (q["start_offset"], q["next_offset"]) if q else None


def converge(c, cl, queue, what, pred, timeout=60):
    got = h.poll(lambda: (lambda q: q if q and pred(q) else None)(
        info(cl, queue)), timeout, 0.3)
    c.check(got is not None, "%s: %s" % (queue, what), info(cl, queue))
    return got


def same_everywhere(c, cl, queues, label, want=None):
    """Each queue's (start, next, bytes) equal on every node alone (and,
    given want {queue: (start, next)}, equal to that). Returns the
    windows."""
    out = {}
    for q in queues:
        def agree(q=q):
            vals = [info(cl, q, i) for i in sorted(cl.nodes)]
            keys = [(v["start_offset"], v["next_offset"], v["bytes"])
                    if v else None for v in vals]
            if None in keys or len(set(keys)) != 1:
                return None
            if want and q in want and keys[0][:2] != want[q]:
                return None
            return keys[0]
        got = h.poll(agree, 60, 0.3)
        c.check(got is not None, "%s: %s's low watermark equal on every "
                "node alone%s (%s)" % (
                    label, q, " at %s" % (want[q],) if want and q in want
                    else "", got if got else
                    [window(info(cl, q, i)) for i in sorted(cl.nodes)]))
        out[q] = got[:2] if got else None
    return out


def tick(c, cl, label):
    """Produce to tick (max_age 1 s) and wait until a retention pass has
    trimmed it: a pass ran with the clocks as they are now."""
    before = info(cl, "tick")
    produce(c, cl, "tick", 1)
    end = before["next_offset"] + 1 if before else 1
    converge(c, cl, "tick", "%s: a retention pass ran" % label,
             lambda q: q["start_offset"] == end, timeout=60)


def set_all(cl, offset_ms):
    for i in cl.nodes:
        cl.set_clock(i, offset_ms)


def append_times(cl, queue, offset, servers=None):
    """[(offset, append_ts)] of queue from offset to its end."""
    r = cl.tern("consume", queue, "--offset", offset, "--json",
                servers=servers, timeout=30)
    out = []
    for line in r.stdout.splitlines():
        if line.strip():
            m = json.loads(line)
            out.append((m["offset"], m["append_ts"]))
    return out


def trace_ms(cl, queue, offset, node):
    r = cl.tern("message", "trace", queue, offset, "--json",
                servers=cl.nodes[node].client_addr, timeout=15)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)["append_ms"]
    except (ValueError, KeyError):
        return None


def make_leader(c, cl, target):
    """Make node target the leader: stop the third node, commit one more
    entry (the leader and target hold it, the third node's log does not,
    so raft's vote rule keeps the third node from winning), kill the
    leader, start the third node again, then the old leader. Bounded."""
    for attempt in range(3):
        lead = cl.wait_leader(60)
        if lead == target:
            return True
        other = [i for i in cl.nodes if i not in (lead, target)][0]
        c.info("attempt %d: leader %d; stop node %d, commit, kill node %d"
               % (attempt, lead, other, lead))
        cl.kill(other)
        produce(c, cl, "mark", 1, servers=[lead])
        cl.kill(lead)
        cl.start_node(other)
        new = cl.wait_leader(60, exclude=(lead,))
        cl.start_node(lead)
        if new == target:
            return True
    return cl.leader() == target


def main(c):
    lib = h.Cluster.clockshift_lib()
    check_shim(c, lib)

    node = {"retention_interval_ms": 200}
    with h.Cluster(3, node=node) as cl:
        c.step("start 3 nodes under the clock shim at +0 (retention every "
               "200 ms)")
        for i in cl.nodes:
            cl.clockshift(i, 0)
        cl.start()
        cl.tern("queue", "create", "dflt", check=True)
        cl.tern("queue", "create", "hour", "--max-age", "1h", check=True)
        cl.tern("queue", "create", "tick", "--max-age", "1s", check=True)
        cl.tern("queue", "create", "mark", check=True)
        q = info(cl, "dflt")
        c.check(q and q["max_age_ms"] == 72 * HOUR, "dflt: max_age 72 h", q)
        q = info(cl, "hour")
        c.check(q and q["max_age_ms"] == HOUR, "hour: max_age 1 h", q)
        produce(c, cl, "dflt", 20)
        produce(c, cl, "hour", 20)
        tick(c, cl, "+0")
        same_everywhere(c, cl, ["dflt", "hour"], "+0",
                        {"dflt": (0, 20), "hour": (0, 20)})

        c.step("every clock +2 h: hour trimmed entirely, dflt whole")
        set_all(cl, 2 * HOUR)
        converge(c, cl, "hour", "trimmed entirely (start = next = 20)",
                 lambda q: q["start_offset"] == 20 and q["messages"] == 0)
        tick(c, cl, "+2 h")
        same_everywhere(c, cl, ["dflt", "hour"], "+2 h",
                        {"dflt": (0, 20), "hour": (20, 20)})

        c.step("every clock +71 h: dflt still whole")
        set_all(cl, 71 * HOUR)
        tick(c, cl, "+71 h")
        q = info(cl, "dflt")
        c.check(q and window(q) == (0, 20) and q["messages"] == 20,
                "dflt: all 20 messages at +71 h", q)
        same_everywhere(c, cl, ["dflt"], "+71 h", {"dflt": (0, 20)})

        c.step("every clock +73 h: dflt trimmed; new messages kept")
        set_all(cl, 73 * HOUR)
        converge(c, cl, "dflt", "trimmed entirely at +73 h (start 20)",
                 lambda q: q["start_offset"] == 20 and q["messages"] == 0)
        t73 = int(time.time() * 1000) + 73 * HOUR
        produce(c, cl, "dflt", 10)
        produce(c, cl, "hour", 10)
        tick(c, cl, "+73 h, after the produce")
        same_everywhere(c, cl, ["dflt", "hour"], "+73 h",
                        {"dflt": (20, 30), "hour": (20, 30)})
        at = append_times(cl, "dflt", 20)
        c.check(len(at) == 10 and all(t >= t73 - 5000 for _, t in at),
                "dflt 20..29 appended at +73 h by the leader's clock",
                at[:3])

        lead = cl.wait_leader(60)
        other = [i for i in sorted(cl.nodes) if i != lead][0]
        c.step("restart node %d at +73 h: it rejoins over peer TLS" % other)
        cl.restart(other)
        produce(c, cl, "mark", 5)
        same_everywhere(c, cl, ["dflt", "hour", "mark"],
                        "node %d restarted at +73 h" % other,
                        {"dflt": (20, 30), "mark": (0, 5)})
        c.check(cl.nodes[other].alive(), "node %d runs" % other)

        lead = cl.wait_leader(60)
        c.step("leader (node %d) clock steps back 10 h while producing"
               % lead)
        last = append_times(cl, "dflt", 20)[-1][1]
        p = cl.tern_popen("produce", "dflt", "--count", 300, "--size", 64,
                          "--batch", 1, "--window", 1)
        h.poll(lambda: (lambda q: q and q["next_offset"] >= 60)(
            info(cl, "dflt", lead)), 60, 0.05)
        c.info("clock stepped back at dflt next offset %s, producer %s" % (
            window(info(cl, "dflt", lead)),
            "running" if p.poll() is None else "done"))
        cl.set_clock(lead, 63 * HOUR)
        _, err = p.communicate(timeout=180)
        c.check(p.returncode == 0, "produce 300 to dflt across the step",
                err.strip()[-300:])
        produce(c, cl, "dflt", 10)  # after the step, for certain
        produce(c, cl, "hour", 10)
        at = append_times(cl, "dflt", 20)
        ts = [t for _, t in at]
        c.check(len(at) == 320 and [o for o, _ in at] ==
                list(range(20, 340)), "dflt holds 20..339", len(at))
        c.check(all(a <= b for a, b in zip(ts, ts[1:])),
                "append times never decrease across the step back",
                [(o, t) for (o, t), (_, u) in zip(at, at[1:]) if u < t][:3])
        top = max(ts)
        c.check(top >= last and ts[-10:] == [top] * 10,
                "messages after the step carry the last append time "
                "(%d), not the leader's clock (10 h behind)" % top, ts[-10:])
        for i in sorted(cl.nodes):
            got = h.poll(lambda i=i: trace_ms(cl, "dflt", 339, i), 30, 0.3)
            c.check(got == top, "node %d: trace of dflt 339 says %s ms" %
                    (i, top), got)
        r = cl.tern("consume", "dflt", "--offset", 0)
        c.check(r.returncode != 0 and "first offset 20" in r.stderr,
                "dflt 0..19 stay trimmed (first offset 20)",
                r.stderr.strip()[-300:])
        time.sleep(3)  # 15 retention intervals with the clock behind
        same_everywhere(c, cl, ["dflt", "hour"], "after the step back",
                        {"dflt": (20, 340), "hour": (20, 40)})

        lead = cl.wait_leader(60)
        fast = [i for i in sorted(cl.nodes) if i != lead][0]
        c.step("node %d (a follower) at +100 h, the others at +0" % fast)
        for i in cl.nodes:
            cl.set_clock(i, 100 * HOUR if i == fast else 0)
        cl.tern("queue", "create", "skew", "--max-age", "24h", check=True)
        produce(c, cl, "skew", 10)
        time.sleep(3)  # 15 intervals: a follower plans no trim
        before = same_everywhere(
            c, cl, ["dflt", "hour", "skew"], "node %d at +100 h" % fast,
            {"dflt": (20, 340), "hour": (20, 40), "skew": (0, 10)})

        c.step("node %d becomes the leader: trims follow its clock" % fast)
        ok = make_leader(c, cl, fast)
        c.check(ok, "node %d is the leader" % fast, cl.leader())
        # Append times are about real + 73 h. At real + 100 h, skew
        # (24 h) and hour (1 h) are past their age, dflt (72 h) is not.
        converge(c, cl, "skew", "trimmed entirely by node %d's clock" % fast,
                 lambda q: q["start_offset"] == 10 and q["messages"] == 0)
        converge(c, cl, "hour", "trimmed entirely by node %d's clock" % fast,
                 lambda q: q["start_offset"] == 40 and q["messages"] == 0)
        t100 = int(time.time() * 1000) + 100 * HOUR
        produce(c, cl, "skew", 5)
        tick(c, cl, "node %d leading at +100 h" % fast)
        same_everywhere(c, cl, ["dflt", "hour", "skew"],
                        "node %d leading" % fast,
                        {"dflt": before["dflt"], "hour": (40, 40),
                         "skew": (10, 15)})
        at = append_times(cl, "skew", 10)
        c.check(len(at) == 5 and all(t >= t100 - 5000 for _, t in at),
                "skew 10..14 appended by node %d's clock (+100 h)" % fast,
                at[:2])


if __name__ == "__main__":
    h.run_test(main)
