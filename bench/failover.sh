#!/usr/bin/env bash
# Failover benchmark: N trials (default 20) of "kill -9 the leader, measure
# the time until the next produce succeeds, restart the killed node, wait
# until the cluster is healthy (writable leader, restarted node caught up)".
# Prints every trial, then min/p50/p90/max in ms, the election timeout in
# use, and one JSON line.
#
#   bench/failover.sh [--trials N] [--single] [--dir DIR] [--base-port P]
#                     [--reuse]
#
# Without --reuse the cluster is started in a fresh temp dir on free ports
# and stopped (by PID) at the end; with --reuse an already running
# scripts/cluster.sh cluster in --dir/--base-port is used and left running.
# Default: each produce attempt is a new `tern produce` process with
# --timeout-ms $ATTEMPT_MS (50: the figure is quantised by it and by the
# start of a process, so keep it small); a trial gives up after 30 s.
# --single: one producer process (bench_failover_gap, libtern) produces
# throughout; a trial's figure is the time from the kill to its first
# acknowledged produce after it (quantised only by libtern's retry
# back-off, 2 ms doubling to 32 ms at most).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
ATTEMPT_MS=${ATTEMPT_MS:-50}
trials=20
single=0
dir=
base=
reuse=0
while [ $# -gt 0 ]; do
    case "$1" in
    --trials) trials=$2; shift 2 ;;
    --single) single=1; shift ;;
    --dir) dir=$2; shift 2 ;;
    --base-port) base=$2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    *) echo "usage: $0 [--trials N] [--single] [--dir DIR] [--base-port P] [--reuse]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "failover: $CLI not found (make build)" >&2; exit 1; }
GAP=${TERN_GAP_BIN:-$TERN_BIN/bench/bench_failover_gap}
if [ "$single" = 1 ] && [ ! -x "$GAP" ]; then
    echo "failover: $GAP not found (make build)" >&2
    exit 1
fi
ET=${TERN_ELECTION_TIMEOUT_MS:-150}

if [ "$reuse" = 0 ]; then
    dir=${dir:-$(mktemp -d "${TMPDIR:-/tmp}/tern-failover.XXXXXX")}
    if [ -z "$base" ]; then
        base=$("$ROOT/scripts/cluster.sh" free-base)
    fi
else
    dir=${dir:-./tern-cluster}
    base=${base:-7400}
fi
cluster() { "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" "$@"; }
ALL=$(cluster servers)
now_ns() { date +%s%N; }

gap_pid=
stop_gap() {
    if [ -n "$gap_pid" ]; then
        kill "$gap_pid" 2>/dev/null || true
        wait "$gap_pid" 2>/dev/null || true
        gap_pid=
    fi
}
if [ "$reuse" = 0 ]; then
    trap 'stop_gap; cluster down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
    cluster up >/dev/null
else
    trap 'stop_gap' EXIT
fi
"$CLI" -s "$ALL" queue create failover-bench >/dev/null 2>&1 || true
gap_log=
if [ "$single" = 1 ]; then
    gap_log=$(mktemp "${TMPDIR:-/tmp}/tern-failover-gap.XXXXXX")
    "$GAP" -s "$ALL" --seconds 3600 --gap-ms 20 >"$gap_log" 2>&1 &
    gap_pid=$!
    sleep 1
fi
# Single mode: the producer's longest gap between two acknowledged
# produces that began between 0.2 s before kill time $1 (wall ms; the kill
# itself lands a little after it) and 3 s after it: the time from its last
# acknowledgement before the kill to its first after it. Prints nothing
# while no such gap has ended.
gap_after() {
    python3 -c 'import sys
k = int(sys.argv[2]); best = None
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 3 and f[0] == "gap":
        s, ms = int(f[1]), int(f[2])
        if k - 200 <= s <= k + 3000 and (best is None or ms > best):
            best = ms
if best is not None: print(best)' "$gap_log" "$1"
}

# last_applied of node i alone (0 when it does not answer).
applied() {
    "$CLI" -s "127.0.0.1:$((base + $1))" --timeout-ms 1000 cluster status --json 2>/dev/null |
        python3 -c 'import json,sys
try: print(int(json.load(sys.stdin).get("last_applied") or 0))
except Exception: print(0)'
}

results=()
for t in $(seq 1 "$trials"); do
    leader=$(cluster leader)
    # Some traffic so the trial does not start on an idle log.
    "$CLI" -s "$ALL" produce failover-bench --count 200 --size 1024 >/dev/null 2>&1
    t0=$(now_ns)
    cluster kill "$leader" >/dev/null
    ok=0
    attempts=0
    if [ "$single" = 1 ]; then
        # The producer process measures; wait (bounded) for its gap.
        # Wait (bounded) for a new leader, then for the gap to end.
        while [ $(($(now_ns) - t0)) -lt 30000000000 ]; do
            nl=$(cluster leader 2>/dev/null || true)
            [ -n "$nl" ] && [ "$nl" != "$leader" ] && break
            sleep 0.05
        done
        ms=
        while [ $(($(now_ns) - t0)) -lt 30000000000 ]; do
            sleep 0.5
            ms=$(gap_after $((t0 / 1000000)))
            [ -n "$ms" ] && break
        done
        [ -n "$ms" ] && ok=1 && attempts=1
    else
        while [ $(($(now_ns) - t0)) -lt 30000000000 ]; do
            attempts=$((attempts + 1))
            if "$CLI" -s "$ALL" --timeout-ms "$ATTEMPT_MS" produce failover-bench \
                --count 1 --size 1024 >/dev/null 2>&1; then
                ok=1
                break
            fi
        done
        ms=$((($(now_ns) - t0) / 1000000))
    fi
    new_leader=$(cluster leader || echo "?")
    cluster start "$leader" >/dev/null
    # Healthy: writable leader and the restarted node caught up (bounded).
    target=$(applied "$new_leader")
    for _ in $(seq 1 300); do
        [ "$(applied "$leader")" -ge "$target" ] && break
        sleep 0.1
    done
    if [ "$ok" = 1 ]; then
        results+=("$ms")
        printf 'trial %2d: killed node %s, new leader node %s, next produce after %5d ms (%d attempts)\n' \
            "$t" "$leader" "$new_leader" "$ms" "$attempts"
    else
        printf 'trial %2d: killed node %s, NO successful produce within 30 s\n' "$t" "$leader"
    fi
done

stop_gap
[ -n "$gap_log" ] && rm -f "$gap_log"
mode=cli
[ "$single" = 1 ] && mode=single
if [ ${#results[@]} -eq 0 ]; then
    echo '{"bench":"failover","mode":"'"$mode"'","trials":'"$trials"',"ok":0}'
    exit 1
fi
printf '%s\n' "${results[@]}" | python3 -c '
import json, sys
v = sorted(int(x) for x in sys.stdin.read().split())
trials, et, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def pct(p):  # nearest rank
    return v[min(len(v) - 1, max(0, -(-p * len(v) // 100) - 1))]
print("failover (kill -9 -> next produce, %s): min %d ms, p50 %d ms, p90 %d ms, "
      "max %d ms over %d/%d trials, election timeout %d ms"
      % (mode, v[0], pct(50), pct(90), v[-1], len(v), trials, et))
print(json.dumps({"bench": "failover", "mode": mode, "trials": trials,
                  "ok": len(v), "election_timeout_ms": et, "min_ms": v[0],
                  "p50_ms": pct(50), "p90_ms": pct(90), "max_ms": v[-1],
                  "samples_ms": v}))
' "$trials" "$ET" "$mode"
[ ${#results[@]} -eq "$trials" ]
