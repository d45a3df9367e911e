#!/usr/bin/env python3
"""`tern bench` against a real node, each mode briefly: produce, consume
(reads back what produce wrote) and e2e (a consumer on a second
connection). Each run prints its table with the log2 latency histogram
(bucket counts adding up to the samples) and the percentiles in order;
--json prints one object with the expected keys on stdout (the table then
goes to stderr); --histogram-svg writes a well-formed SVG (parsed with
xml.etree) with one bar per bucket; --duration ends a run before --count.
Errors: consume of an empty queue and of a missing one exit 1 with a
message; a bad --mode, e2e with --size < 8 and --replication outside
produce exit 2 with the usage; an SVG path that cannot be written exits
1 naming it. --stages prints the leader's stage table next to the
client-observed latency (every commit sampled once per leader stage) and
"stages_us" in the JSON; --latencies writes every sample, sorted. No figure is asserted: only what the output
says and that it is consistent."""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

SVG_NS = "{http://www.w3.org/2000/svg}"
JSON_KEYS = {"queue", "mode", "size", "count", "window", "batch", "acked",
             "errors", "elapsed_s", "msgs_per_s", "mb_per_s", "latency_us"}
PCT_KEYS = ("p50", "p90", "p99", "p999", "max")


def histogram(text, title):
    """(samples announced, [(lo, hi, count)], {pXX: us}) of the histogram
    titled title in text, or None."""
    m = re.search(r"  %s histogram \(us, log2 buckets, (\d+) samples\):\n"
                  r"((?:  +\d+ \.\. \d+ +\|#* +\d+\n)*)"
                  r"  p50 (\d+) us  p90 (\d+) us  p99 (\d+) us  "
                  r"p999 (\d+) us  max (\d+) us\n" % re.escape(title), text)
    if not m:
        return None
    rows = [tuple(int(x) for x in re.match(
        r"\s*(\d+) \.\. (\d+) +\|#* +(\d+)$", ln).groups())
        for ln in m.group(2).splitlines()]
    pct = dict(zip(PCT_KEYS, (int(m.group(i)) for i in range(3, 8))))
    return int(m.group(1)), rows, pct


def check_histogram(c, what, text, title, samples):
    got = histogram(text, title)
    if not c.check(got is not None, "%s: %s histogram and percentiles" %
                   (what, title), text[-600:]):
        return None
    n, rows, pct = got
    if isinstance(samples, int):
        c.check(n == samples, "%s: %d samples" % (what, samples), n)
    else:  # (at least, at most): one per fetch, a fetch may return fewer
        c.check(samples[0] <= n <= samples[1], "%s: %d..%d samples" %
                (what, samples[0], samples[1]), n)
    c.check(len(rows) >= 1 and sum(r[2] for r in rows) == n,
            "%s: bucket counts add up to the samples" % what, rows)
    c.check(all(r[1] == max(1, 2 * r[0]) for r in rows) and
            all(rows[i + 1][0] == rows[i][1] for i in range(len(rows) - 1)),
            "%s: consecutive log2 buckets" % what, rows)
    vals = [pct[k] for k in PCT_KEYS]
    c.check(vals == sorted(vals) and vals[-1] < rows[-1][1] and
            vals[-1] >= rows[-1][0], "%s: p50 <= p90 <= p99 <= p999 <= max,"
            " max in the last bucket" % what, (pct, rows[-1]))
    return pct


def check_json(c, what, r, mode, acked, table_title, samples):
    try:
        js = json.loads(r.stdout)
    except ValueError:
        c.check(False, "%s: --json is one JSON object" % what, r.stdout)
        return None
    c.check(len(r.stdout.strip().splitlines()) == 1,
            "%s: one line on stdout" % what, r.stdout)
    c.check(JSON_KEYS <= set(js), "%s: keys" % what,
            sorted(JSON_KEYS - set(js)))
    lat = js.get("latency_us", {})
    c.check(set(PCT_KEYS) <= set(lat) and
            [lat[k] for k in PCT_KEYS] == sorted(lat[k] for k in PCT_KEYS),
            "%s: latency_us p50..max in order" % what, lat)
    c.check(js.get("mode") == mode and js.get("acked") == acked and
            js.get("errors") == 0, "%s: mode %s, %d acked, no errors" %
            (what, mode, acked), js)
    pct = check_histogram(c, what + " (stderr)", r.stderr, table_title,
                          samples)
    if pct is not None:
        c.check(all(pct[k] == lat.get(k) for k in PCT_KEYS),
                "%s: JSON percentiles are the table's" % what, (pct, lat))
    return js


def check_svg(c, path, title, samples):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        c.check(False, "SVG is well-formed XML", e)
        return
    c.check(root.tag == SVG_NS + "svg", "SVG root element", root.tag)
    bars = [e for e in root.iter(SVG_NS + "rect") if e.get("class") == "bar"]
    counts = []
    for b in bars:
        t = b.find(SVG_NS + "title")
        m = re.match(r"\d+\.\.\d+ us: (\d+)$", t.text if t is not None
                     else "")
        counts.append(int(m.group(1)) if m else -1)
    c.check(len(bars) >= 1 and sum(counts) == samples,
            "SVG: one bar per bucket, counts add up to %d" % samples, counts)
    texts = " ".join(e.text or "" for e in root.iter(SVG_NS + "text"))
    c.check(title in texts and "p50 " in texts and "max " in texts,
            "SVG: title and percentiles", texts[:200])


def check_stages(c, text, samples):
    """The --stages table in text: the observed row with samples, the
    append->commit row, the leader's disk row with as many samples as
    commits (one node: nothing to wait for but its own disk), apply, and
    the remainder outside the commit; the leader's whole part of each
    request (request read -> answer queued) and what lies outside it."""
    num = r"\s+(\d+(?:\.\d+)?)"
    m = re.search(r"  stages \(leader node \d+, p50/p99 us, bucket upper "
                  r"bounds\)\n    stage\s+p50\s+p99\s+count\n"
                  r"    client produce \(observed\)" + num * 3 + r"\n"
                  r"    leader append -> commit" + num * 3 + r"\n"
                  r"((?:      .*\n)+)"
                  r"    outside the commit \(wire, batching, reply\)" + num +
                  r"\n    outside the leader \(client side, wire\)" + num,
                  text)
    if not c.check(m is not None, "--stages: table", text[-900:]):
        return
    c.check(int(m.group(3)) == samples, "--stages: observed row has %d "
            "samples" % samples, m.group(3))
    commits = int(m.group(6))
    rows = {}
    for ln in m.group(7).splitlines():
        rm = re.match(r"      (.+?)" + num * 3 + r"$", ln)
        if rm:
            rows[rm.group(1)] = (float(rm.group(2)), float(rm.group(3)),
                                 int(rm.group(4)))
    disk = rows.get("leader append durable (own disk write)")
    c.check(disk is not None and disk[2] == commits and
            disk[0] <= disk[1], "--stages: leader disk row, one sample per "
            "commit", (commits, rows))
    c.check("FSM apply (one entry)" in rows, "--stages: apply row", rows)
    at = rows.get("at the leader: read -> answer queued")
    c.check(at is not None and at[2] == samples and at[0] <= at[1],
            "--stages: the leader's whole part, one sample per request",
            (samples, rows))


def bench(cl, *args):
    return cl.tern("bench", *args, timeout=90, timeout_ms=10000)


def main(c):
    with h.Cluster(1) as cl:
        c.step("start 1 node")
        cl.start()

        c.step("produce: table, histogram, percentiles")
        r = bench(cl, "bq", "--count", 200, "--window", 4, "--batch", 2)
        c.check(r.returncode == 0, "bench produce exits 0", r.stderr)
        c.check(re.search(r"bench bq: mode produce, size 1024 B, count 200, "
                          r"window 4, batch 2\n  acknowledged   200 msgs "
                          r"\(0 errors\)\n", r.stdout) is not None,
                "produce: header and 200 acknowledged", r.stdout[:300])
        c.check(re.search(r"  latency/batch  p50 \d+ us  p99 \d+ us  "
                          r"p999 \d+ us  max \d+ us\n", r.stdout) is not None,
                "produce: latency line per batch", r.stdout[:400])
        check_histogram(c, "produce", r.stdout, "produce", 100)

        c.step("produce --json")
        r = bench(cl, "bq", "--count", 200, "--size", 64, "--json")
        c.check(r.returncode == 0, "bench produce --json exits 0", r.stderr)
        check_json(c, "produce --json", r, "produce", 200, "produce", 200)

        c.step("produce --stages: the leader's stage table")
        lat = os.path.join(cl.dir, "lat.txt")
        r = bench(cl, "bs", "--count", 100, "--stages", "--latencies", lat)
        c.check(r.returncode == 0, "bench --stages exits 0", r.stderr)
        check_stages(c, r.stdout, 100)
        try:
            with open(lat) as f:
                v = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            v = []
        c.check(len(v) == 100 and v == sorted(v) and v[0] >= 0,
                "--latencies: 100 samples, sorted", v[:5])
        r = bench(cl, "bs", "--count", 50, "--stages", "--json")
        c.check(r.returncode == 0, "bench --stages --json exits 0", r.stderr)
        check_stages(c, r.stderr, 50)
        try:
            js = json.loads(r.stdout)
        except ValueError:
            js = {}
        sg = js.get("stages_us", {})
        commits = js.get("replication_us", {}).get("count", 0)
        c.check(commits >= 50 and sg.get("leader_disk", {}).get("count") ==
                commits and sg.get("apply", {}).get("count", 0) >= commits,
                "JSON: stages_us counts every commit once (leader_disk) and "
                "every apply", (commits, sg))
        c.check(all(0 <= v["p50"] <= v["p99"] for v in sg.values()) and
                all(v["count"] == 0 for k, v in sg.items()
                    if k.startswith("f_")),
                "JSON: p50 <= p99; a leader has no follower stage", sg)

        c.step("consume: reads back what produce wrote")
        r = bench(cl, "bq", "--mode", "consume", "--count", 300,
                  "--batch", 100)
        c.check(r.returncode == 0, "bench consume exits 0", r.stderr)
        c.check(re.search(r"mode consume, .*\n  read           300 msgs "
                          r"\(0 errors\)\n", r.stdout) is not None,
                "consume: 300 read", r.stdout[:300])
        c.check("  latency/fetch  p50 " in r.stdout,
                "consume: latency line per fetch", r.stdout[:400])
        check_histogram(c, "consume", r.stdout, "fetch", (3, 300))
        r = bench(cl, "bq", "--mode", "consume", "--count", 1000, "--json")
        c.check(r.returncode == 0, "bench consume --json exits 0", r.stderr)
        js = check_json(c, "consume --json", r, "consume", 400, "fetch",
                        (4, 400))
        if js:
            # 200 x 1024 B + 200 x 64 B read in elapsed_s
            want = (200 * 1024 + 200 * 64) / 1e6 / js["elapsed_s"]
            c.check(abs(js["mb_per_s"] - want) <= 0.01 * want + 0.001,
                    "consume: MB/s is the bytes read over the time",
                    (js["mb_per_s"], want))

        c.step("e2e with --json and --histogram-svg")
        svg = os.path.join(cl.dir, "e2e.svg")
        r = bench(cl, "be", "--mode", "e2e", "--count", 150, "--size", 16,
                  "--window", 4, "--json", "--histogram-svg", svg)
        c.check(r.returncode == 0, "bench e2e exits 0", r.stderr)
        check_json(c, "e2e --json", r, "e2e", 150, "produce-to-delivery",
                   150)
        check_svg(c, svg, "tern bench be: produce-to-delivery latency", 150)
        r = bench(cl, "be", "--mode", "e2e", "--count", 50, "--size", 8)
        c.check(r.returncode == 0, "bench e2e (text) exits 0", r.stderr)
        c.check("  latency/msg    p50 " in r.stdout,
                "e2e: latency line per message", r.stdout[:400])
        check_histogram(c, "e2e", r.stdout, "produce-to-delivery", 50)

        c.step("--duration ends a run before --count")
        r = bench(cl, "bd", "--count", 5000000, "--size", 8,
                  "--duration", "300ms", "--json")
        c.check(r.returncode == 0, "bench --duration exits 0", r.stderr)
        try:
            js = json.loads(r.stdout)
        except ValueError:
            js = {}
        c.check(0 < js.get("acked", 0) < 5000000 and
                js.get("errors") == 0, "stopped by the duration, not the "
                "count", js)

        c.step("errors: exit codes and messages")
        c.check(cl.tern("queue", "create", "empty").returncode == 0,
                "queue create empty")
        r = bench(cl, "empty", "--mode", "consume")
        c.check(r.returncode == 1 and "empty holds no message" in r.stderr,
                "consume of an empty queue: exit 1 and why", (r.returncode,
                                                              r.stderr))
        r = bench(cl, "nosuch", "--mode", "consume")
        c.check(r.returncode == 1 and "bench nosuch" in r.stderr and
                "no such queue" in r.stderr,
                "consume of a missing queue: exit 1 and why",
                (r.returncode, r.stderr))
        r = bench(cl, "bq", "--mode", "fast")
        c.check(r.returncode == 2 and
                "bench --mode fast: produce, consume or e2e" in r.stderr,
                "bad --mode: exit 2 and the choices", (r.returncode,
                                                       r.stderr))
        r = bench(cl, "bq", "--mode", "e2e", "--size", 4)
        c.check(r.returncode == 2 and "usage: tern bench" in r.stderr,
                "e2e with --size 4: exit 2 and the usage",
                (r.returncode, r.stderr))
        r = bench(cl, "bq", "--mode", "consume", "--replication")
        c.check(r.returncode == 2 and "usage: tern bench" in r.stderr,
                "--replication with consume: exit 2 and the usage",
                (r.returncode, r.stderr))
        r = bench(cl, "bq", "--duration", "0s")
        c.check(r.returncode == 2 and "bench --duration 0s" in r.stderr,
                "--duration 0s: exit 2", (r.returncode, r.stderr))
        bad = os.path.join(cl.dir, "no-such-dir", "h.svg")
        r = bench(cl, "bq", "--count", 10, "--histogram-svg", bad)
        c.check(r.returncode == 1 and "write %s" % bad in r.stderr,
                "unwritable SVG path: exit 1 naming it", (r.returncode,
                                                          r.stderr))


if __name__ == "__main__":
    h.run_test(main)
