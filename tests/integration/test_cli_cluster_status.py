#!/usr/bin/env python3
"""`tern cluster status` against 3 real nodes shows each member's software
version: the answering node's from its own STATUS answer (top-level
"version"), every other member's from asking that member; the text
output has a version column, the JSON output a "version" per member. A
stopped node shows "-" (JSON null) in the answer of a live node, and so
does a node that is stopped with SIGSTOP (it accepts the connection but
never answers: the CLI's short per-member wait gives up and still
exits 0)."""
import json
import os
import re
import signal
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402


def ternd_version(cl):
    """"MAJOR.MINOR.PATCH" from `ternd --version`."""
    r = subprocess.run([cl.ternd, "--version"], capture_output=True,
                       text=True, timeout=10)
    m = re.match(r"ternd (\d+\.\d+\.\d+)$", r.stdout.strip())
    return m.group(1) if m else None


def member_versions_text(out):
    """{member id: version} from the members lines of the text output."""
    got = {}
    for ln in out.splitlines():
        m = re.match(r"\s+(\d+)  raft \S+  client \S+  version (\S+)$", ln)
        if m:
            got[int(m.group(1))] = m.group(2)
    return got


def status(cl, i, *extra):
    return cl.tern("cluster", "status", *extra,
                   servers=cl.nodes[i].client_addr, timeout=30,
                   timeout_ms=3000)


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        cl.start()
        want = ternd_version(cl)
        c.check(want is not None, "ternd --version", want)

        c.step("every node's answer lists all three versions")
        for i in sorted(cl.nodes):
            r = status(cl, i)
            c.check(r.returncode == 0, "cluster status of node %d" % i,
                    r.stderr)
            c.check("version:       %s\n" % want in r.stdout,
                    "node %d: its own version line" % i, r.stdout)
            got = member_versions_text(r.stdout)
            c.check(got == {1: want, 2: want, 3: want},
                    "node %d: version of members 1, 2, 3" % i, r.stdout)
            r = status(cl, i, "--json")
            c.check(r.returncode == 0, "cluster status --json of node %d" % i,
                    r.stderr)
            try:
                js = json.loads(r.stdout)
            except ValueError:
                js = {}
            c.check(js.get("version") == want,
                    "node %d: JSON version" % i, r.stdout)
            c.check(sorted((m.get("id"), m.get("version"))
                           for m in js.get("members", [])) ==
                    [(1, want), (2, want), (3, want)],
                    "node %d: JSON member versions" % i, r.stdout)

        c.step("a stopped node shows '-' (JSON null)")
        c.check(cl.stop(3) is not None, "node 3 stopped")
        r = status(cl, 1)
        c.check(r.returncode == 0, "cluster status of node 1", r.stderr)
        c.check(member_versions_text(r.stdout) == {1: want, 2: want, 3: "-"},
                "versions 1, 2 and '-' for node 3", r.stdout)
        r = status(cl, 2, "--json")
        js = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check({m.get("id"): m.get("version")
                 for m in js.get("members", [])} ==
                {1: want, 2: want, 3: None},
                "JSON: null for node 3", r.stdout)

        c.step("a node that never answers (SIGSTOP) shows '-' too")
        cl.start_node(3)
        h.poll(lambda: member_versions_text(status(cl, 1).stdout).get(3) ==
               want, 20, interval=0.2)
        nd = cl.nodes[3]
        nd.proc.send_signal(signal.SIGSTOP)
        try:
            r = status(cl, 1)
            c.check(r.returncode == 0, "cluster status of node 1 exits 0",
                    r.stderr)
            c.check(member_versions_text(r.stdout) ==
                    {1: want, 2: want, 3: "-"},
                    "'-' for the stopped node 3", r.stdout)
        finally:
            nd.proc.send_signal(signal.SIGCONT)


if __name__ == "__main__":
    h.run_test(main)
