#!/bin/bash
# Short Jepsen-style smoke suite for tern: 8 runs (kill,
# pause, partition, power loss, a mix with tiny snapshot thresholds so
# snapshots and InstallSnapshot happen, and retention under kills and
# partitions with tiny segments, so segments are deleted and restarted or
# far-behind nodes start from checkpoints), each SMOKE_TIME seconds of faults
# (default 60) on SMOKE_NODES nodes (default 3); 6.3 min measured on 2
# cores. Then three short runs (at most 30 s of faults each): work-queue
# under kills and delayed under partitions (docs/WORKQUEUES.md; 1.8 min
# together measured on 2 shared cores), and membership changes (remove
# and add back, the leader too; a removed node wiped and added back
# empty; a voter wiped, rejoined by the leader by itself;
# docs/MEMBERSHIP.md; about 45 s measured), and power loss on tern's own
# raft log store (docs/LOGSTORE.md) with segments small enough that they
# are forgotten and their files recycled during the run (about 45 s).
# Prints a summary table and exits non-zero when any run is not
# valid (invalid, unknown, harness error, or a node that exited on its
# own). Needs root; see jepsen/README.md.
# Env: SMOKE_TIME, SMOKE_NODES, TERN_BUILD (build dir with node/ternd,
# cli/tern, client/libtern.so; the driver and the power-loss shim are
# built into it if missing).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
TIME="${SMOKE_TIME:-60}"
NODES="${SMOKE_NODES:-3}"
BUILD="${TERN_BUILD:-$(dirname "$HERE")/build-jepsen}"
export TERN_BUILD="$BUILD"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="/tmp/jepsen-runs/smoke-$STAMP"
mkdir -p "$OUT"

# The driver's Makefile rebuilds it when its sources or libtern changed.
make -s -C "$HERE/driver" BUILD="$BUILD" || exit 3
if [ ! -x "$BUILD/jepsen/tern-powerloss-restore" ] ||
    [ ! -f "$BUILD/jepsen/libtern_powerloss.so" ]; then
    make -s -C "$HERE/powerloss" OUT="$BUILD/jepsen" || exit 3
fi

stop=0
trap 'stop=1' INT TERM

# name | nemesis | extra args | at most this many seconds of faults
RUNS=(
    "kill|kill,kill-leader|--queues 1"
    "pause|pause,pause-leader|--queues 1"
    "partition|partition,partition-leader|--queues 4"
    "power-loss-uv-store|power-loss,power-loss-all|--queues 1 --log-store uv"
    "mixed-snapshots|partition,kill,pause,pause-kill,partition-kill|--queues 4 --snapshot-bytes 32K --snapshot-trailing 8"
    "retention|kill,kill-leader,partition,partition-leader|--queues 2 --workload retention --max-messages 20 --snapshot-bytes 32K --snapshot-trailing 8 --log-segment-bytes 16K"
    "work-queue|kill,kill-leader|--queues 2 --workload work-queue|30"
    "delayed|partition,partition-leader|--queues 1 --workload delayed|30"
    "membership|member,member-wipe,wipe|--queues 1 --snapshot-bytes 32K --snapshot-trailing 8|30"
    "power-loss-tern-store|power-loss,power-loss-all|--queues 1 --log-store tern --raft-segment-bytes 64K --snapshot-bytes 32K --snapshot-trailing 8|30"
)
i=0
for spec in "${RUNS[@]}"; do
    [ "$stop" = 1 ] && break
    i=$((i + 1))
    IFS='|' read -r name nem extra cap <<<"$spec"
    t="$TIME"
    if [ -n "$cap" ] && [ "${t%.*}" -gt "$cap" ]; then
        t="$cap"
    fi
    dir="$OUT/$(printf '%02d' $i)-$name"
    echo "=== smoke run $i: $name (nemesis $nem, ${t}s, $NODES nodes) -> $dir"
    # shellcheck disable=SC2086
    timeout --foreground -k 10 $((${t%.*} * 3 + 400)) \
        python3 "$HERE/harness.py" --nodes "$NODES" --time "$t" \
        --nemesis "$nem" --run-dir "$dir" $extra >"$OUT/$name.out" 2>&1
    rc=$?
    echo "rc=$rc" >>"$OUT/$name.out"
    tail -n 8 "$OUT/$name.out"
    [ "$rc" = 130 ] && stop=1
done

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
bad = 0
for d in sorted(os.listdir(out)):
    p = os.path.join(out, d, "summary.json")
    if not os.path.isdir(os.path.join(out, d)):
        continue
    try:
        s = json.load(open(p))
    except (OSError, ValueError):
        rows.append((d, "?", "error", "", "", "", "", "", "", "", "", "",
                     ""))
        bad += 1
        continue
    c = s.get("counts", {})
    rec = s.get("recovery_after_heal_s")
    verdict = s["verdict"]
    if verdict == "valid" and s.get("crashes"):
        verdict = "valid+crash"
    if verdict != "valid":
        bad += 1
    rows.append((d, s["nemesis"], verdict, c.get("acknowledged", ""),
                 c.get("info", ""), c.get("lost", ""),
                 c.get("duplicated", ""), c.get("unexpected", ""),
                 c.get("fifo", ""), c.get("lost_on_node", ""),
                 len(s.get("crashes", [])),
                 "%.3f" % rec if rec is not None else "none",
                 c.get("longest_write_gap_ms", "-"),
                 c.get("longest_write_gap_up_ms", "-")))
hdr = ("run", "nemesis", "verdict", "acked", "info", "lost", "dup",
       "unexp", "fifo", "lost-on-node", "crashes", "recovery-s",
       "write-gap-ms", "gap-majority-up-ms")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr] + rows:
    print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
print("runs %d, not valid %d, dir %s" % (len(rows), bad, out))
sys.exit(1 if bad or not rows else 0)
PY
rc=$?
[ "$stop" = 1 ] && exit 130
exit $rc
