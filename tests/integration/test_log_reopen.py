#!/usr/bin/env python3
"""SIGHUP reopens the log file ([log] file, here with [log] format = json)
so logrotate works: after the file is renamed and ternd gets SIGHUP, the
node keeps serving, logs "log reopened" into a new file at the configured
path, and the renamed file stops growing. Every line of both files is one
JSON object with ts, level, node and msg. A second SIGHUP and a request
that logs land in the new file only."""
import json
import os
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def lines_of(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def check_json(c, where, lines):
    bad = []
    for ln in lines:
        try:
            o = json.loads(ln)
            if not all(k in o for k in ("ts", "level", "node", "msg")):
                bad.append(ln)
        except ValueError:
            bad.append(ln)
    c.check(lines and not bad, "%s: %d lines, each a JSON object with ts, "
            "level, node, msg" % (where, len(lines)), bad[:3])


def main(c):
    with h.Cluster(1) as cl:
        nd = cl.nodes[1]
        path = os.path.join(cl.dir, "ternd-1.log")
        with open(nd.config, "a") as f:
            f.write("\n[log]\nfile = %s\nformat = json\n" % path)
        c.step("start one node logging to %s" % os.path.basename(path))
        cl.start()
        c.check(h.poll(lambda: any('"started"' in ln for ln in
                                   lines_of(path)), 10) is not None,
                "the file gets the start lines")
        c.check("started" not in nd.log_text(), "stderr gets none of them")

        c.step("rename the file, SIGHUP")
        rotated = path + ".1"
        os.rename(path, rotated)
        nd.proc.send_signal(signal.SIGHUP)
        c.check(h.poll(lambda: any("log reopened" in ln for ln in
                                   lines_of(path)), 10) is not None,
                "a new file at the path says \"log reopened\"")
        time.sleep(0.2)
        c.check(nd.alive(), "the node is still running")
        old = os.path.getsize(rotated)

        c.step("the node keeps serving; new lines go to the new file")
        cl.tern("queue", "create", "q", check=True)
        r = cl.tern("produce", "q", "--count", 20)
        c.check(r.returncode == 0, "produce works", r.stderr)
        r = cl.tern("cluster", "transfer", timeout_ms=3000)
        c.check(r.returncode != 0, "a transfer on one node is refused (and "
                "logged)", r.stdout)
        nd.proc.send_signal(signal.SIGHUP)
        c.check(h.poll(lambda: sum("log reopened" in ln for ln in
                                   lines_of(path)) >= 2 and
                       any("transfer" in ln for ln in lines_of(path)),
                       10) is not None,
                "second reopen and the transfer line in the new file")
        c.check(os.path.getsize(rotated) == old,
                "the renamed file stopped growing (%d bytes)" % old)
        check_json(c, "renamed file", lines_of(rotated))
        check_json(c, "new file", lines_of(path))
        got = cl.consume_all("q", expect=20)
        c.check(len(got) == 20, "20 messages read back", len(got))


if __name__ == "__main__":
    h.run_test(main)
