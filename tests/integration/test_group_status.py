#!/usr/bin/env python3
"""Group status, dead-letter queues and deliveries on 3 nodes
(docs/WORKQUEUES.md, "Group status"): `tern group status` of a shared
group whose two consumers hold leases (per-consumer counts, in-flight,
lag) and of a stream group; a poison message dead-lettered -> DLQ depth 1
in the status and in `tern dlq list`; `tern dlq redrive` moves it back
(the queue gets it again without tern-dlq-* headers, the redrive group
has committed it, a second redrive moves nothing); `tern message trace`
shows leased and acknowledged states; `tern cluster status` counts the
pending timers of a delayed produce."""
import json
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def shared_lines(path):
    """'<offset>\\t<count>\\t<id>' lines of a shared consumer's output."""
    out = []
    for line in open(path).read().splitlines():
        p = line.split("\t")
        if len(p) >= 3 and p[0].isdigit():
            out.append(p)
    return out


def status(cl, queue, group=None):
    """`tern group status --json` -> {group: record}, or None."""
    args = ["group", "status", queue] + ([group] if group else []) + \
        ["--json"]
    r = cl.tern(*args)
    if r.returncode != 0:
        return None
    return {x["group"]: x for x in map(json.loads, r.stdout.splitlines())}


def produce(c, cl, queue, n, prefix, *extra):
    r = cl.tern("produce", queue, "--count", n, "--size", 16, "--id-prefix",
                prefix, *extra, timeout=120)
    c.check(r.returncode == 0, "produce %d to %s %s" % (n, queue,
                                                        " ".join(extra)),
            r.stderr.strip()[-300:])


def trace(cl, queue, offset):
    r = cl.tern("message", "trace", queue, offset, "--json")
    if r.returncode != 0:
        return None
    return {d["group"]: d for d in json.loads(r.stdout).get("deliveries",
                                                             [])}


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        c.check(leader in cl.nodes, "writable leader elected")
        for q in ("work", "events", "poison"):
            r = cl.tern("queue", "create", q)
            c.check(r.returncode == 0, "queue create " + q, r.stderr.strip())

        c.step("a shared group with two consumers holding leases")
        r = cl.tern("group", "config", "work", "w", "--shared",
                    "--ack-timeout", "600s")
        c.check(r.returncode == 0, "group config work w --shared",
                r.stderr.strip())
        held = []
        for i, n in enumerate((3, 2)):
            produce(c, cl, "work", n, "w%d" % i)
            out = os.path.join(cl.dir, "c%d.txt" % i)
            f = open(out, "w")
            p = cl.tern_popen("consume", "work", "--group", "w", "--shared",
                              "--follow", stdout=f)
            got = h.poll(lambda: len(shared_lines(out)) >= n, 60)
            # Stopped, the consumer keeps its connection and its leases;
            # its parked receive (1 s long poll) ends empty before more
            # messages come.
            p.send_signal(signal.SIGSTOP)
            time.sleep(2.5)
            held.append((p, f))
            c.check(got, "consumer %d holds %d leases" % (i, n),
                    open(out).read()[-200:])

        def shared_ok():
            s = status(cl, "work", "w")
            return s if s and s["w"]["in_flight"] == 5 else None
        s = h.poll(shared_ok, 30)
        c.check(bool(s), "group status: 5 in flight", s)
        if s:
            g = s["w"]
            c.check(g["mode"] == "shared", "mode shared", g["mode"])
            c.check(sorted(x["leases"] for x in g["consumers"]) == [2, 3],
                    "per consumer: 3 and 2", g["consumers"])
            c.check(g["committed"] == 0 and g["next"] == 5 and
                    g["end"] == 5 and g["lag"] == 5,
                    "floor 0, next 5, end 5, lag 5", g)
            c.check(g["ready"] == 0 and g["dlq"] == "work-dlq-w" and
                    g["dlq_depth"] == 0, "nothing ready, no DLQ yet", g)
        r = cl.tern("group", "status", "work")
        c.check(r.returncode == 0 and "\tshared\t" in r.stdout and
                ":3" in r.stdout and ":2" in r.stdout,
                "the table names the consumers with their counts", r.stdout)

        c.step("trace: leased to a consumer")
        t = h.poll(lambda: trace(cl, "work", 0), 20)
        c.check(bool(t) and t.get("w", {}).get("state") == "leased" and
                t["w"]["count"] == 1 and t["w"]["consumer_id"] > 0,
                "offset 0 is leased (delivery 1)", t)
        for p, f in held:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
            f.close()

        c.step("trace: acknowledged")
        r = cl.tern("consume", "work", "--group", "w", "--shared", "--ack",
                    "--follow", "--idle-exit-ms", 3000, timeout=120)
        c.check(r.returncode == 0, "a consumer acks the released ones",
                r.stderr.strip())
        t = h.poll(lambda: (lambda x: x if x and x.get("w", {}).get(
            "state") == "settled" else None)(trace(cl, "work", 0)), 30)
        c.check(bool(t), "offset 0 is acknowledged", t)
        r = cl.tern("message", "trace", "work", 1)
        c.check(r.returncode == 0 and "deliveries 1 shared groups" in
                r.stdout and "acknowledged" in r.stdout,
                "the text form says so", r.stdout[-300:])

        c.step("a stream group")
        produce(c, cl, "events", 10, "e")
        r = cl.tern("consume", "events", "--group", "s", "--max", 4,
                    "--commit")
        c.check(r.returncode == 0, "a stream consumer commits 4",
                r.stderr.strip())
        s = h.poll(lambda: (lambda x: x if x and x["s"]["committed"] == 4
                            else None)(status(cl, "events", "s")), 30)
        c.check(bool(s) and s["s"]["mode"] == "stream" and
                s["s"]["lag"] == 6, "stream group: committed 4, lag 6", s)

        c.step("a poison message goes to the DLQ")
        produce(c, cl, "poison", 1, "p", "--header", "trace-id=42")
        r = cl.tern("group", "config", "poison", "p", "--shared",
                    "--max-deliveries", 1)
        c.check(r.returncode == 0, "max_deliveries 1", r.stderr.strip())
        r = cl.tern("consume", "poison", "--group", "p", "--shared", "--max",
                    1)
        c.check(r.returncode == 0 and r.stdout.startswith("0\t1\t"),
                "delivered once, not acked", r.stdout)

        def dead():
            cl.tern("consume", "poison", "--group", "p", "--shared")
            s = status(cl, "poison", "p")
            return s if s and s["p"]["dlq_depth"] == 1 else None
        s = h.poll(dead, 30, interval=0.5)
        c.check(bool(s), "group status: DLQ depth 1", s)
        r = cl.tern("dlq", "list", "poison")
        c.check(r.returncode == 0 and "poison-dlq-p\tpoison\tp\t1" in
                r.stdout, "dlq list poison", r.stdout)
        r = cl.tern("dlq", "list")
        c.check(r.returncode == 0 and "poison-dlq-p\tpoison\tp\t1" in
                r.stdout and "work-dlq-w\twork\tw\t0" in r.stdout,
                "dlq list of every queue", r.stdout)

        c.step("redrive")
        r = cl.tern("dlq", "redrive", "poison-dlq-p", timeout=120)
        c.check(r.returncode == 0 and "moved 1" in r.stdout and
                "to poison: 1" in r.stdout, "dlq redrive moves 1",
                r.stdout + r.stderr)
        r = cl.tern("message", "get", "poison", "--offset", 1, "--json")
        c.check(r.returncode == 0 and '"p-0' in r.stdout and
                "trace-id" in r.stdout and "tern-dlq" not in r.stdout,
                "the queue has it again, headers kept, tern-dlq-* gone",
                r.stdout[-400:] + r.stderr)
        s = status(cl, "poison-dlq-p", "tern-redrive")
        c.check(bool(s) and s["tern-redrive"]["committed"] == 1 and
                s["tern-redrive"]["lag"] == 0,
                "the redrive group has committed it", s)
        r = cl.tern("dlq", "redrive", "poison-dlq-p", timeout=120)
        c.check(r.returncode == 0 and "moved 0" in r.stdout,
                "a second redrive moves nothing", r.stdout + r.stderr)

        c.step("pending timers in cluster status")
        produce(c, cl, "work", 2, "later", "--delay", "1h")
        now = int(time.time() * 1000)

        def timers():
            r = cl.tern("cluster", "status", "--json")
            if r.returncode != 0:
                return None
            js = json.loads(r.stdout)
            return js if js.get("timers_pending", 0) >= 2 else None
        js = h.poll(timers, 30, interval=0.5)
        c.check(bool(js) and js["timers_oldest_due_ms"] > now,
                "2 pending, due in the future", js)
        r = cl.tern("cluster", "status")
        c.check(r.returncode == 0 and "timers:" in r.stdout and
                "2 pending" in r.stdout, "the text form shows them",
                r.stdout[-300:])


if __name__ == "__main__":
    h.run_test(main)
