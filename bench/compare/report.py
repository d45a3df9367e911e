#!/usr/bin/env python3
"""Table and plots for bench/compare.sh from the raw results of one run.

    report.py RES_DIR --commit C --build-type T --mode full|quick
              [--results-md FILE] [--images DIR] [--host TEXT]
              [--pipe-warmup N] [--peers "P ..."] [--cmd TEXT]

RES_DIR holds what compare.sh collected: floors.json (fsync floor lines),
xport.json (bench_xport, tcp_floor), tern-seq.json, tern-pipe.json,
tern-failover.json (tern bench / bench/failover.sh JSON lines),
PEER.json (peers.py) and *.lat (sorted latencies, us). Prints a markdown
section on stdout: a table (floor | tern | nats | rabbitmq | etcd) of
sequential produce p50/p99 and its ratio to the floor of the same run,
pipelined throughput and failover, then tern's stage breakdown;
--pipe-warmup names the unmeasured pipelined warm-up every system took
first. With
--results-md the section is inserted into FILE under its
"## Side-by-side comparison (bench/compare.sh)" heading (created at the
end if missing), newest first. With --images, gnuplot draws
compare-latency-cdf.png and compare-throughput.png into DIR (the section
links them relative to FILE). Python stdlib and gnuplot only."""
import json
import os
import subprocess
import sys
import time

PEERS = ("nats", "rabbitmq", "etcd")
HEADING = "## Side-by-side comparison (bench/compare.sh)"


def load(path):
    """The last JSON object line of path, or {}."""
    try:
        with open(path) as f:
            lines = [ln for ln in f if ln.lstrip().startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


def load_all(path):
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.lstrip().startswith("{")]
    except (OSError, ValueError):
        return []


def fmt(v, unit="", p=0):
    if v is None:
        return "-"
    return ("{:,.%df}" % p).format(v) + unit


def ratio(v, floor):
    return "%.2fx" % (v / floor) if v and floor else "-"


def collect(res):
    floors = {f["writers"]: f for f in load_all(os.path.join(res,
                                                             "floors.json"))}
    tcp = load(os.path.join(res, "xport.json")).get("tcp_floor", {})
    floors["dsync"] = load(os.path.join(res, "dsync.json"))
    seq = load(os.path.join(res, "tern-seq.json"))
    pipe = load(os.path.join(res, "tern-pipe.json"))
    fo = load(os.path.join(res, "tern-failover.json"))
    systems = {}
    if seq or pipe or fo:
        lat = seq.get("latency_us", {})
        systems["tern"] = {
            "seq": {"p50_us": lat.get("p50"), "p99_us": lat.get("p99"),
                    "n": seq.get("acked")},
            "pipe": {"msgs_per_s": pipe.get("msgs_per_s"),
                     "window": pipe.get("window")},
            "failover": {"median_ms": fo.get("median_ms", fo.get("p50_ms")),
                         "p90_ms": fo.get("p90_ms"), "mode": fo.get("mode"),
                         "min_ms": fo.get("min_ms"),
                         "max_ms": fo.get("max_ms"), "ok": fo.get("ok"),
                         "trials": fo.get("trials")},
            "ack": "fsync on a majority",
        }
    acks = {"nats": "in memory on 2 of 3 (file store syncs on a timer)",
            "rabbitmq": "fsync on a majority", "etcd": "fsync on a majority"}
    for p in PEERS:
        r = load(os.path.join(res, p + ".json"))
        if r:
            r["ack"] = acks[p]
            systems[p] = r
    return floors, tcp, seq, systems


def dsync_floor(floors):
    """The pipelined row's floor cell: the disk's durable append rate with
    3 writers (floors.py dsync), and the 1 KiB messages a second it carries
    if each node wrote every message once and nothing else."""
    d = floors.get("dsync") or {}
    mb, w = d.get("mb_per_s"), d.get("writers")
    if not mb or not w:
        return "-"
    return ("durable appends, %d writers x %d KiB: %s MB/s = %s msg/s of "
            "1 KiB once per node" % (w, d.get("block", 0) >> 10,
                                     fmt(mb), fmt(mb * 1e6 / (w * 1024),
                                                  "")))


def table(floors, tcp, seq, systems, cols):
    f2 = floors.get(2, {}).get("p50_us")
    rtt = tcp.get("p50_us")
    seq_floor = f2 + rtt if f2 and rtt else None
    out = []
    out.append("| metric | floor | " + " | ".join(cols) + " |")
    out.append("| --- | --- |" + " --- |" * len(cols))

    def row(name, floor, cells):
        out.append("| %s | %s | %s |" % (name, floor, " | ".join(cells)))

    def get(s, *path):
        v = systems.get(s, {})
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    row("sequential produce p50 (one in flight)",
        "%s (fdatasync 2 writers + tcp rtt)" % fmt(seq_floor, " us"),
        [fmt(get(s, "seq", "p50_us"), " us") if not get(s, "error")
         else "failed" for s in cols])
    row("  ratio to the floor", "1x",
        [ratio(get(s, "seq", "p50_us"), seq_floor) for s in cols])
    row("  ratio to fdatasync, 2 writers alone", "%s" % fmt(f2, " us"),
        [ratio(get(s, "seq", "p50_us"), f2) for s in cols])
    row("sequential produce p99", "-",
        [fmt(get(s, "seq", "p99_us"), " us") for s in cols])
    row("pipelined throughput, window 256", dsync_floor(floors),
        [fmt(get(s, "pipe", "msgs_per_s"), " msg/s") for s in cols])

    def fo(s):
        m = get(s, "failover", "median_ms")
        if m is None:
            return "-"
        return "%s (%s-%s, %s/%s trials)" % (
            fmt(m, " ms"), fmt(get(s, "failover", "min_ms")),
            fmt(get(s, "failover", "max_ms")), get(s, "failover", "ok"),
            get(s, "failover", "trials"))
    row("kill -9 leader -> next ack, median (min-max)", "-",
        [fo(s) for s in cols])
    row("an ack means", "-", [get(s, "ack") or "-" for s in cols])
    return out


def floor_lines(floors, tcp):
    out = []
    for k in sorted(k for k in floors if isinstance(k, int)):
        f = floors[k]
        out.append("- write(1 KiB) + fdatasync, %d writer%s at once: p50 %s, "
                   "p99 %s (%d samples)" % (k, "s" if k > 1 else "",
                                            fmt(f["p50_us"], " us"),
                                            fmt(f["p99_us"], " us"), f["n"]))
    d = floors.get("dsync") or {}
    if d.get("mb_per_s"):
        out.append("- durable appends, %d writers at once, %d KiB blocks "
                   "(O_DIRECT%s | O_DSYNC, one in flight each, %s s): %s "
                   "MB/s, %s writes/s, a write p50 %s, p99 %s"
                   % (d["writers"], d["block"] >> 10,
                      "" if d.get("direct") else " refused, so none",
                      d.get("secs"), fmt(d["mb_per_s"]),
                      fmt(d.get("writes_per_s")), fmt(d.get("p50_us"), " us"),
                      fmt(d.get("p99_us"), " us")))
    if tcp:
        out.append("- TCP loopback round trip, 1 KiB each way (bench_xport "
                   "tcp_floor): p50 %s, p99 %s" % (fmt(tcp.get("p50_us"),
                                                       " us", 1),
                                                   fmt(tcp.get("p99_us"),
                                                       " us", 1)))
    return out


STAGES = (("request_to_propose", "request read -> entry proposed"),
          ("leader_disk", "leader append durable (its own fdatasync)"),
          ("append_to_post", "leader append -> AppendEntries sent"),
          ("post_to_result", "-> follower durable + ack (round trip)"),
          ("result_to_commit", "-> commit index covers it"),
          ("apply", "FSM apply"),
          ("apply_to_answer", "applied -> answer queued"),
          ("request_to_answer", "at the leader: request read -> answer "
           "queued"))


def stage_lines(seq):
    sg = seq.get("stages_us") or {}
    rep = seq.get("replication_us") or {}
    lat = seq.get("latency_us") or {}
    if not sg:
        return []
    out = ["| tern stage (leader, sequential run) | p50 | p99 |",
           "| --- | --- | --- |",
           "| client produce (observed) | %s | %s |" % (
               fmt(lat.get("p50"), " us"), fmt(lat.get("p99"), " us")),
           "| leader append -> commit | %s | %s |" % (
               fmt(rep.get("p50"), " us", 1), fmt(rep.get("p99"), " us", 1))]
    for k, title in STAGES:
        if k in sg and sg[k].get("count"):
            out.append("| &nbsp;&nbsp;%s | %s | %s |" % (
                title, fmt(sg[k]["p50"], " us", 1),
                fmt(sg[k]["p99"], " us", 1)))
    if lat.get("p50") and rep.get("p50"):
        rest = lat["p50"] - rep["p50"] - (sg.get("apply", {}).get("p50") or 0)
        out.append("| outside the commit (wire, batching, reply), p50 "
                   "difference | %s | |" % fmt(max(rest, 0), " us", 1))
        node = sum((sg.get(k, {}).get("p50") or 0)
                   for k in ("request_to_propose", "apply_to_answer"))
        at = sg.get("request_to_answer", {})
        if at.get("count"):
            out.append("| outside the leader (the client, the wire, "
                       "wake-ups): observed p50 - the leader's p50 | %s | |"
                       % fmt(max(lat["p50"] - at["p50"], 0), " us", 1))
        elif node > 0:
            out.append("| &nbsp;&nbsp;of which the client, the wire and "
                       "wake-ups (without the node's two stages) | %s | |"
                       % fmt(max(rest - node, 0), " us", 1))
    return out


def gnuplot(script):
    r = subprocess.run(["gnuplot"], input=script, text=True,
                       capture_output=True, timeout=120)
    if r.returncode != 0:
        print("report: gnuplot: %s" % r.stderr[-400:], file=sys.stderr)
    return r.returncode == 0


def plots(res, images, floors, tcp, systems, cols, title):
    os.makedirs(images, exist_ok=True)
    curves = []
    for s in cols:
        src = os.path.join(res, s + ".lat")
        try:
            with open(src) as f:
                v = sorted(float(x) for x in f if x.strip())
        except (OSError, ValueError):
            continue
        if not v:
            continue
        dat = os.path.join(res, s + ".cdf")
        with open(dat, "w") as f:
            for i, x in enumerate(v):
                f.write("%.1f %.5f\n" % (x, (i + 1) / len(v)))
        curves.append("'%s' using 1:2 with lines lw 2 title '%s'" % (dat, s))
    f2 = floors.get(2, {}).get("p50_us")
    rtt = tcp.get("p50_us")
    arrows = ""
    if f2 and rtt:
        arrows = ("set arrow from %f, graph 0 to %f, graph 1 nohead dt 2 "
                  "lc rgb 'gray40'\nset label 'floor p50' at %f, graph 0.95 "
                  "right offset -0.5,0 tc rgb 'gray40'\n" % (
                      f2 + rtt, f2 + rtt, f2 + rtt))
    ok = True
    if curves:
        ok = gnuplot(
            "set terminal pngcairo size 900,540\nset output '%s'\n"
            "set title 'Sequential produce latency, 1 KiB, 3 nodes (%s)'\n"
            "set xlabel 'latency (us, log scale)'\nset ylabel 'fraction'\n"
            "set logscale x\nset grid\nset key bottom right\n"
            "set yrange [0:1]\n%splot %s\n" % (
                os.path.join(images, "compare-latency-cdf.png"), title,
                arrows, ", ".join(curves))) and ok
    bars = [(s, systems[s].get("pipe", {}).get("msgs_per_s"))
            for s in cols if s in systems]
    bars = [(s, v) for s, v in bars if v]
    if bars:
        dat = os.path.join(res, "throughput.dat")
        with open(dat, "w") as f:
            for i, (s, v) in enumerate(bars):
                f.write("%d %s %.1f\n" % (i, s, v))
        ok = gnuplot(
            "set terminal pngcairo size 800,480\nset output '%s'\n"
            "set title 'Pipelined produce, window 256, 1 KiB, 3 nodes (%s)'\n"
            "set ylabel 'acknowledged messages/s'\nset style fill solid 0.6\n"
            "set boxwidth 0.6\nset grid ytics\nset yrange [0:*]\n"
            "set xrange [-0.6:%f]\nunset key\n"
            "plot '%s' using 1:3:xtic(2) with boxes, '' using 1:3:"
            "(sprintf('%%.0f', $3)) with labels offset 0,0.8\n" % (
                os.path.join(images, "compare-throughput.png"), title,
                len(bars) - 0.4, dat)) and ok
    return ok


def record(md, section):
    try:
        with open(md) as f:
            text = f.read()
    except OSError:
        text = "# tern measurements\n"
    if HEADING in text:
        head, _, rest = text.partition(HEADING)
        text = head + HEADING + "\n\n" + section + rest.lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + HEADING + "\n\n" + section
    with open(md, "w") as f:
        f.write(text)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    res = argv[1]
    opt = {"--commit": "?", "--build-type": "?", "--mode": "full",
           "--results-md": None, "--images": None, "--host": "",
           "--cmd": "bench/compare.sh", "--peers": " ".join(PEERS),
           "--pipe-warmup": "0"}
    i = 2
    while i + 1 < len(argv):
        if argv[i] not in opt:
            print(__doc__, file=sys.stderr)
            return 2
        opt[argv[i]] = argv[i + 1]
        i += 2
    floors, tcp, seq, systems = collect(res)
    cols = ["tern"] + [p for p in opt["--peers"].split() if p in PEERS]
    title = "%s, %s build" % (opt["--commit"], opt["--build-type"])
    lines = ["### %s, measured on %s (%s build%s)" % (
        time.strftime("%Y-%m-%d"), opt["--commit"], opt["--build-type"],
        ", quick mode" if opt["--mode"] == "quick" else ""), ""]
    lines.append("    %s" % opt["--cmd"])
    lines.append("")
    warm = int(opt["--pipe-warmup"])
    lines.append("One run, everything on 127.0.0.1 of this host, 3 nodes per "
                 "system, 1 KiB messages, tern durability=disk.%s %s" % (
                     (" Each system first took %s pipelined messages (window "
                      "256) of warm-up, not measured." % format(warm, ","))
                     if warm > 0 else "", opt["--host"]))
    lines.append("")
    lines += table(floors, tcp, seq, systems, cols)
    lines.append("")
    lines.append("Floors of the same run (on the data dirs' filesystem):")
    lines.append("")
    lines += floor_lines(floors, tcp)
    errs = ["- %s failed: %s" % (s, systems[s]["error"]) for s in cols
            if s in systems and systems[s].get("error")]
    if errs:
        lines.append("")
        lines += errs
    st = stage_lines(seq)
    if st:
        lines.append("")
        lines += st
        lines.append("")
        lines.append("The leader's own fdatasync runs alongside the round "
                     "trip to the followers: the stages overlap and do not "
                     "add up.")
    if opt["--images"] and opt["--results-md"]:
        rel = os.path.relpath(opt["--images"],
                              os.path.dirname(os.path.abspath(
                                  opt["--results-md"])))
        lines.append("")
        lines.append("![sequential produce latency CDF](%s/"
                     "compare-latency-cdf.png)" % rel)
        lines.append("![pipelined throughput](%s/compare-throughput.png)"
                     % rel)
    section = "\n".join(lines) + "\n\n"
    if opt["--images"]:
        plots(res, opt["--images"], floors, tcp, systems, cols, title)
    print(section, end="")
    if opt["--results-md"]:
        record(opt["--results-md"], section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
