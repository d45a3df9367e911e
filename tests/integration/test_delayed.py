#!/usr/bin/env python3
"""Delayed messages on 3 nodes (docs/WORKQUEUES.md, "Delayed and scheduled
messages"). (1) Messages produced with `tern produce --delay` are not
readable before their due time: the queue is polled with a fetch while the
wall clock is before the due time, and no message at all may show up
early; each message's append time is at or after its due time. After the
due time every message is readable within due + 5 s, once each. (2) The
leader is killed between the produce and the due time: after the new
leader fires them, each delayed message appears exactly once. (3) A queue
deleted (and created again under the same name) before the due time:
nothing appears in it, and no node logs a timer error (no error loop)."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

FMT = "%o\t%p\t%T"


def read_due(path):
    """'<id>\\tdue=<ms>' ack lines -> {id: due ms}."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2 and parts[1].startswith("due="):
                out[parts[0]] = int(parts[1][4:])
    return out


def fetch(cl, queue, servers=None):
    """[(offset, id, append_ms)] of queue from offset 0, or None."""
    r = cl.tern("consume", queue, "--offset", 0, "--format", FMT,
                servers=servers, timeout=15, timeout_ms=3000)
    if r.returncode != 0:
        return None
    out = []
    for line in r.stdout.splitlines():
        p = line.split("\t")
        if len(p) == 3 and p[0].isdigit() and p[2].isdigit():
            out.append((int(p[0]), p[1], int(p[2])))
    return out


def now_ms():
    return int(time.time() * 1000)


def produce_delayed(c, cl, queue, n, delay, prefix):
    acks = os.path.join(cl.dir, "acks-%s.txt" % prefix)
    r = cl.tern("produce", queue, "--count", n, "--batch", 5, "--delay",
                delay, "--ack-log", acks, "--id-prefix", prefix, timeout=60)
    c.check(r.returncode == 0, "produce --delay %s of %d to %s" %
            (delay, n, queue), r.stderr.strip()[-300:])
    due = read_due(acks)
    c.check(len(due) == n, "%d due times in the ack log" % n, len(due))
    return due


def wait_all(cl, queue, n, deadline_ms, servers=None):
    """Poll until n messages are readable or the wall clock passes
    deadline_ms; returns the last read."""
    got = []
    while now_ms() < deadline_ms:
        got = fetch(cl, queue, servers) or got
        if len(got) >= n:
            break
        time.sleep(0.1)
    return got


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        cl.tern("queue", "create", "dq", check=True)

        c.step("(1) 20 messages with a 4 s delay: none early")
        due = produce_delayed(c, cl, "dq", 20, "4s", "d")
        first_due = min(due.values())
        early = []
        polls = 0
        while now_ms() < first_due - 200:
            got = fetch(cl, "dq", servers=[leader])
            polls += 1
            if got:
                early = got
                break
            time.sleep(0.1)
        c.check(polls > 0 and not early, "no message readable before the "
                "due time (%d fetches)" % polls, early[:3])
        got = wait_all(cl, "dq", 20, max(due.values()) + 5000)
        ids = [g[1] for g in got]
        c.check(sorted(ids) == sorted(due), "all 20 readable by due + 5 s",
                "%d read" % len(got))
        c.check(not h.duplicates(ids), "each once", h.duplicates(ids))
        late = [(g[1], g[2], due.get(g[1])) for g in got
                if g[1] in due and g[2] < due[g[1]]]
        c.check(not late, "every append time >= its due time", late[:3])
        c.info("delivery after due: max %d ms" %
               max([g[2] - due[g[1]] for g in got if g[1] in due] or [0]))
        for i in cl.nodes:
            g = wait_all(cl, "dq", 20, now_ms() + 10000,
                         servers=cl.nodes[i].client_addr)
            c.check([x[1] for x in g] == ids, "node %d has the same "
                    "sequence" % i)

        c.step("(2) kill -9 the leader (node %d) before the due time" %
               leader)
        cl.tern("queue", "create", "kq", check=True)
        due2 = produce_delayed(c, cl, "kq", 10, "3s", "k")
        c.check(now_ms() < min(due2.values()), "killed before the due time")
        cl.kill(leader)
        new_leader = cl.wait_leader(20, exclude=(leader,))
        c.info("new leader node %d" % new_leader)
        survivors = [i for i in cl.nodes if i != leader]
        got = wait_all(cl, "kq", 10, max(max(due2.values()), now_ms()) + 5000,
                       servers=survivors)
        time.sleep(1.0)  # a second fire, if any, would show by now
        got = fetch(cl, "kq", servers=survivors) or got
        ids = [g[1] for g in got]
        c.check(sorted(ids) == sorted(due2), "all 10 fired by the new leader",
                "%d read" % len(got))
        c.check(not h.duplicates(ids), "each exactly once",
                h.duplicates(ids))
        cl.start_node(leader)

        c.step("(3) queue deleted and created again before the due time")
        cl.tern("queue", "create", "gone", check=True)
        due3 = produce_delayed(c, cl, "gone", 5, "2s", "g")
        r = cl.tern("queue", "delete", "gone")
        c.check(r.returncode == 0, "queue delete gone", r.stderr.strip())
        r = cl.tern("queue", "create", "gone")
        c.check(r.returncode == 0, "queue create gone again",
                r.stderr.strip())
        c.check(now_ms() < min(due3.values()), "both before the due time")
        end = max(due3.values()) + 3000
        seen = []
        while now_ms() < end:
            seen = fetch(cl, "gone") or seen
            if seen:
                break
            time.sleep(0.2)
        c.check(not seen, "nothing appears in the new queue", seen[:3])
        # The fire of the dropped timers went through (the pass moved on):
        # a later delayed produce to another queue is still delivered.
        cl.tern("queue", "create", "after", check=True)
        due4 = produce_delayed(c, cl, "after", 1, "500ms", "a")
        got = wait_all(cl, "after", 1, max(due4.values()) + 5000)
        c.check(len(got) == 1, "a later delayed message still fires")
        for i, nd in cl.nodes.items():
            text = nd.log_text()
            bad = [ln for ln in text.splitlines()
                   if "timer" in ln and ("WARN" in ln or "ERROR" in ln)]
            c.check(not bad, "node %d logs no timer error" % i, bad[:3])


if __name__ == "__main__":
    h.run_test(main)
