#!/bin/sh
# Removes what an interrupted (SIGKILLed) harness run left behind, from the
# run dir's state.json: its ternd/driver/delayer processes (by pid, only if
# they are still ternd / tern-jepsen-driver / tern-delayer inside one of the
# run's namespaces), its namespaces, the --disk-mb mounts and loop devices
# (only mounts under the run dir, loop devices backed by its images) and its
# blackhole route.
# Usage: jepsen/cleanup.sh /tmp/jepsen-runs/<run-dir>
set -eu
exec python3 - "$1" <<'PY'
import json, os, signal, subprocess, sys
st = json.load(open(os.path.join(sys.argv[1], "state.json")))
pids = list(st.get("pids", {}).values()) + [st.get("driver_pid")] + \
    list(st.get("delayer_pids", []))
run_dir = os.path.realpath(sys.argv[1])
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
    if comm in ("ternd", "tern-jepsen-dri", "tern-delayer") and \
            ns.startswith(st["prefix"] + "-"):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
        print("killed %s %d" % (comm, pid))
for ns in reversed(st.get("namespaces", [])):
    if ns.startswith(st["prefix"] + "-"):
        subprocess.run(["ip", "netns", "del", ns])
        print("deleted netns", ns)
for mnt in reversed(st.get("mounts", [])):
    if os.path.realpath(mnt).startswith(run_dir + "/"):
        if subprocess.run(["umount", mnt]).returncode != 0:
            subprocess.run(["umount", "-l", mnt])
        print("unmounted", mnt)
for dev in reversed(st.get("loops", [])):
    back = subprocess.run(["losetup", "-n", "-O", "BACK-FILE", dev],
                          stdout=subprocess.PIPE, text=True).stdout.strip()
    if back and os.path.realpath(back).startswith(run_dir + "/"):
        subprocess.run(["losetup", "-d", dev])
        print("detached", dev)
if st.get("route"):
    subprocess.run(["ip", "route", "del", "blackhole", st["route"]])
    print("deleted route", st["route"])
PY
