#!/bin/bash
# jepsen/matrix.sh: the full Jepsen-style matrix (`make jepsen`):
# every workload x every nemesis, REPEAT times each, one harness run each,
# then the summary table (jepsen/summarize.py) by nemesis and by workload x
# nemesis, written to OUT/summary.txt and OUT/summary.md.
#
#   jepsen/matrix.sh [--time S] [--nodes 3|5] [--repeat N] [--out DIR]
#                    [--nemeses "a b ..."] [--workloads "w1 w2 ..."]
#                    [--max-minutes M] [-- extra harness args]
#
# Defaults: --time $JEPSEN_TIME or 120, --nodes $JEPSEN_NODES or 5,
# --repeat 1, every nemesis in NEMESES and every workload in WORKLOADS
# below, --max-minutes 0 (no limit; otherwise no new run starts after M
# minutes, and the table covers the runs done). While a file OUT/PAUSE
# exists no new run starts (the time paused does not count toward
# --max-minutes): touch it to get an idle machine for a benchmark between
# runs, remove it to go on. Interrupt (Ctrl-C) stops
# the current run cleanly (the harness tears its namespaces down) and
# still prints the table. Exit 0 when every run was valid without node
# crashes, 1 otherwise. Needs root; see jepsen/README.md.
# Env: TERN_BUILD (build dir, default <repo>/build-jepsen; built here when
# its ternd is missing or older than the sources).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
TIME="${JEPSEN_TIME:-120}"
NODES="${JEPSEN_NODES:-5}"
REPEAT=1
MAXMIN=0
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="/tmp/jepsen-runs/matrix-$STAMP"

# Workload name -> harness arguments. Every name must be a workload the
# driver and checker know (jepsen/README.md, "Workloads").
declare -A WL=(
    [queue-1]="--queues 1"
    [queue-4]="--queues 4"
    [async-pipelined]="--queues 2 --async-window 16"
    [snapshots]="--queues 2 --snapshot-bytes 32K --snapshot-trailing 8"
    [idempotent]="--queues 4 --workload idempotent"
    [group]="--queues 2 --workload group"
    [retention]="--queues 2 --workload retention --max-messages 20 --snapshot-bytes 32K --snapshot-trailing 8 --log-segment-bytes 16K"
    [work-queue]="--queues 2 --workload work-queue"
    [delayed]="--queues 2 --workload delayed"
)
WORKLOADS="queue-1 queue-4 async-pipelined snapshots idempotent group retention work-queue delayed"
# Nemeses (harness --nemesis values; a comma list picks one per round).
NEMESES="partition partition-leader partition-halves partition-ring
partition-bridge kill kill-leader kill-majority kill-all pause pause-leader
power-loss power-loss-all disk-full disk-full-all bitflip truncate clock
loss delay pause-kill partition-kill partition,kill,pause member member-wipe
wipe member,member-wipe,wipe,kill,partition"
EXTRA=()

while [ $# -gt 0 ]; do
    case "$1" in
    --time) TIME=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --nemeses) NEMESES=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --max-minutes) MAXMIN=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
for w in $WORKLOADS; do
    [ -n "${WL[$w]+x}" ] || { echo "matrix: unknown workload $w (known: ${!WL[*]})" >&2; exit 2; }
done

BUILD="${TERN_BUILD:-$REPO/build-jepsen}"
export TERN_BUILD="$BUILD"
# Never judge a stale binary (jepsen/FINDINGS.md F1-F3): rebuild when any
# source is newer than ternd.
newest_src=$(find "$REPO"/{include,common,proto,rdma,raft,index,client,cli,node} -name '*.[ch]' -newer "$BUILD/node/ternd" 2>/dev/null | head -1)
if [ ! -x "$BUILD/node/ternd" ] || [ -n "$newest_src" ] ||
    [ ! -x "$BUILD/jepsen/tern-jepsen-driver" ]; then
    echo "matrix: building tern in $BUILD"
    cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 3
    cmake --build "$BUILD" -j"${JOBS:-2}" --target ternd tern_cli libtern >/dev/null || exit 3
    make -s -C "$HERE/driver" BUILD="$BUILD" || exit 3
fi
for t in powerloss delayer; do
    if [ -f "$HERE/$t/Makefile" ]; then
        make -s -C "$HERE/$t" OUT="$BUILD/jepsen" || exit 3
    fi
done

mkdir -p "$OUT"
stop=0
trap 'stop=1' INT TERM
t0=$(date +%s)
i=0
for w in $WORKLOADS; do
    for nem in $NEMESES; do
        if [ "$NODES" -lt 5 ] && [ "$nem" = partition-ring ]; then
            continue # a majorities ring needs 5 nodes
        fi
        for ((r = 1; r <= REPEAT; r++)); do
            [ "$stop" = 1 ] && break 3
            if [ -e "$OUT/PAUSE" ]; then
                echo "matrix: paused ($OUT/PAUSE exists)"
                p0=$(date +%s)
                while [ -e "$OUT/PAUSE" ] && [ "$stop" = 0 ]; do sleep 2; done
                t0=$((t0 + $(date +%s) - p0))
                [ "$stop" = 1 ] && break 3
                echo "matrix: resumed"
            fi
            if [ "$MAXMIN" != 0 ] && [ $(($(date +%s) - t0)) -ge $((MAXMIN * 60)) ]; then
                echo "matrix: --max-minutes $MAXMIN reached"
                break 3
            fi
            i=$((i + 1))
            dir="$OUT/$(printf '%03d' $i)-$w-${nem//,/+}"
            echo "=== matrix run $i: workload $w, nemesis $nem, ${TIME}s, $NODES nodes -> $dir"
            # shellcheck disable=SC2086
            timeout --foreground -k 10 $((${TIME%.*} * 3 + 400)) \
                python3 "$HERE/harness.py" --nodes "$NODES" --time "$TIME" \
                --nemesis "$nem" --run-dir "$dir" ${WL[$w]} "${EXTRA[@]}" \
                >"$dir.out" 2>&1
            rc=$?
            echo "rc=$rc" >>"$dir.out"
            # Tag the run with its workload for the table.
            if [ -f "$dir/summary.json" ]; then
                python3 - "$dir/summary.json" "$w" <<'PY'
import json, sys
p, w = sys.argv[1], sys.argv[2]
s = json.load(open(p))
s.setdefault("workload", w)
json.dump(s, open(p, "w"), indent=1)
PY
            fi
            tail -n 3 "$dir.out"
            [ "$rc" = 130 ] && stop=1
        done
    done
done

{
    echo "# tern jepsen matrix $STAMP: $i runs, ${TIME}s each, $NODES nodes"
    echo
    python3 "$HERE/summarize.py" "$OUT" --markdown
    echo
    python3 "$HERE/summarize.py" "$OUT" --by workload,nemesis --markdown
} >"$OUT/summary.md"
python3 "$HERE/summarize.py" "$OUT" | tee "$OUT/summary.txt"
rc=${PIPESTATUS[0]}
echo "matrix: $i runs; table in $OUT/summary.md"
[ "$stop" = 1 ] && exit 130
exit "$rc"
