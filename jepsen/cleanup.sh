#!/bin/sh
# Removes what an interrupted (SIGKILLed) harness run left behind, from the
# run dir's state.json: its ternd/driver processes (by pid, only if they are
# still ternd / tern-jepsen-driver inside one of the run's namespaces),
# its namespaces and its blackhole route.
# Usage: jepsen/cleanup.sh /tmp/jepsen-runs/<run-dir>
set -eu
exec python3 - "$1" <<'PY'
import json, os, signal, subprocess, sys
st = json.load(open(os.path.join(sys.argv[1], "state.json")))
pids = list(st.get("pids", {}).values()) + [st.get("driver_pid")]
for pid in pids:
    if not pid:
        continue
    try:
        comm = open("/proc/%d/comm" % pid).read().strip()
    except OSError:
        continue
    ns = subprocess.run(["ip", "netns", "identify", str(pid)],
                        stdout=subprocess.PIPE, text=True).stdout.strip()
    # Only a process inside one of this run's namespaces (pids get reused).
    if comm in ("ternd", "tern-jepsen-dri") and \
            ns.startswith(st["prefix"] + "-"):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
        print("killed %s %d" % (comm, pid))
for ns in reversed(st.get("namespaces", [])):
    if ns.startswith(st["prefix"] + "-"):
        subprocess.run(["ip", "netns", "del", ns])
        print("deleted netns", ns)
if st.get("route"):
    subprocess.run(["ip", "route", "del", "blackhole", st["route"]])
    print("deleted route", st["route"])
PY
