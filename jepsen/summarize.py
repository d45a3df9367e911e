#!/usr/bin/env python3
"""jepsen/summarize.py: the matrix table over many runs.

Reads every summary.json (written by harness.py at the end of a run) found
under the given directories, and prints one row per nemesis (or per
workload x nemesis with --by workload,nemesis): runs, verdicts, acknowledged
messages, lost, duplicated, unexpected, FIFO violations, lost-on-node,
node crashes, the median and max recovery time after the final heal
(seconds from the final heal to the first successful produce), and the
longest write gap of the runs (ms without an acknowledged produce in a
fault window: checker.py, "write gaps"), also counted only while a
running node reached a majority of the nodes (gap-up-max-ms).

    summarize.py DIR... [--by nemesis|workload,nemesis|nodes,nemesis]
                        [--markdown] [--json OUT]

Exit status: 0 when every run is valid without node crashes, 1 otherwise,
2 when no run was found. Standard library only.
"""
import argparse
import json
import os
import statistics
import sys

COLS = ("runs", "valid", "invalid", "other", "acked", "resent", "lost", "dup",
        "unexp", "fifo", "lost-on-node", "crashes", "rec-median-s",
        "rec-max-s", "gap-max-ms", "gap-up-max-ms")


def find_summaries(dirs):
    for d in dirs:
        for root, _subdirs, files in os.walk(d):
            if "summary.json" in files:
                yield os.path.join(root, "summary.json")


def load(path):
    try:
        with open(path) as fh:
            s = json.load(fh)
    except (OSError, ValueError):
        return None
    s.setdefault("workload", "total-queue")
    return s


def key_of(s, by):
    parts = []
    for k in by:
        v = s.get(k)
        parts.append(str(v if v is not None else "?"))
    return tuple(parts)


def aggregate(summaries, by):
    rows = {}
    for s in summaries:
        k = key_of(s, by)
        r = rows.setdefault(k, {"runs": 0, "valid": 0, "invalid": 0,
                                "other": 0, "acked": 0, "resent": 0,
                                "lost": 0,
                                "dup": 0, "unexp": 0, "fifo": 0,
                                "lost-on-node": 0, "crashes": 0,
                                "rec": [], "gaps": [], "gaps_up": [],
                                "bad_dirs": []})
        c = s.get("counts") or {}
        r["runs"] += 1
        v = s.get("verdict")
        if v == "valid":
            r["valid"] += 1
        elif v == "invalid":
            r["invalid"] += 1
        else:
            r["other"] += 1
        if v != "valid" or s.get("crashes"):
            r["bad_dirs"].append(s.get("dir", "?"))
        r["acked"] += int(c.get("acknowledged", 0) or 0)
        r["resent"] += int(c.get("acked_after_resend", 0) or 0)
        r["lost"] += int(c.get("lost", 0) or 0)
        r["dup"] += int(c.get("duplicated", 0) or 0)
        r["unexp"] += int(c.get("unexpected", 0) or 0)
        r["fifo"] += int(c.get("fifo", 0) or 0)
        r["lost-on-node"] += int(c.get("lost_on_node", 0) or 0)
        r["crashes"] += len(s.get("crashes") or [])
        rec = s.get("recovery_after_heal_s")
        if rec is not None:
            r["rec"].append(float(rec))
        if c.get("longest_write_gap_ms") is not None:
            r["gaps"].append(int(c["longest_write_gap_ms"]))
        if c.get("longest_write_gap_up_ms") is not None:
            r["gaps_up"].append(int(c["longest_write_gap_up_ms"]))
    return rows


def cells(r):
    med = "%.3f" % statistics.median(r["rec"]) if r["rec"] else "none"
    mx = "%.3f" % max(r["rec"]) if r["rec"] else "none"
    gap = str(max(r["gaps"])) if r["gaps"] else "none"
    gap_up = str(max(r["gaps_up"])) if r["gaps_up"] else "none"
    return [str(r[c]) for c in COLS[:-4]] + [med, mx, gap, gap_up]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--by", default="nemesis")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    by = a.by.split(",")
    summaries = [s for s in (load(p) for p in find_summaries(a.dirs)) if s]
    if not summaries:
        print("summarize: no summary.json under %s" % " ".join(a.dirs),
              file=sys.stderr)
        return 2
    rows = aggregate(summaries, by)
    total = aggregate(summaries, [])[()]
    hdr = list(by) + list(COLS)
    table = [cells(rows[k]) for k in sorted(rows)]
    keys = [list(k) for k in sorted(rows)]
    body = [k + c for k, c in zip(keys, table)]
    body.append(["total"] + [""] * (len(by) - 1) + cells(total))
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r in body:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(str(r[i])) for r in body + [hdr])
             for i in range(len(hdr))]
        for r in [hdr] + body:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
    bad = [d for r in rows.values() for d in r["bad_dirs"]]
    for d in bad:
        print("not valid (or crashed): %s" % d)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"by": by, "rows": {"/".join(k): v
                                          for k, v in rows.items()},
                       "total": total}, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
