#!/usr/bin/env bash
# Failover benchmark: N trials (default 10) of "kill -9 the leader, measure
# the time until the next produce succeeds, restart the killed node, wait
# until the cluster is healthy (writable leader, restarted node caught up)".
# Prints every trial, then min/median/max in ms and one JSON line.
#
#   bench/failover.sh [--trials N] [--dir DIR] [--base-port P] [--reuse]
#
# Without --reuse the cluster is started in a fresh temp dir on free ports
# and stopped (by PID) at the end; with --reuse an already running
# scripts/cluster.sh cluster in --dir/--base-port is used and left running.
# Each produce attempt is one message with --timeout-ms $ATTEMPT_MS (50: the
# figure is quantised by it, so keep it small);
# a trial gives up after 30 s.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
ATTEMPT_MS=${ATTEMPT_MS:-50}
trials=10
dir=
base=
reuse=0
while [ $# -gt 0 ]; do
    case "$1" in
    --trials) trials=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --base-port) base=$2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    *) echo "usage: $0 [--trials N] [--dir DIR] [--base-port P] [--reuse]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "failover: $CLI not found (make build)" >&2; exit 1; }

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

if [ "$reuse" = 0 ]; then
    trap 'cluster down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
    cluster up >/dev/null
fi
"$CLI" -s "$ALL" queue create failover-bench >/dev/null 2>&1 || true

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
    while [ $(($(now_ns) - t0)) -lt 30000000000 ]; do
        attempts=$((attempts + 1))
        if "$CLI" -s "$ALL" --timeout-ms "$ATTEMPT_MS" produce failover-bench \
            --count 1 --size 1024 >/dev/null 2>&1; then
            ok=1
            break
        fi
    done
    ms=$((($(now_ns) - t0) / 1000000))
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

if [ ${#results[@]} -eq 0 ]; then
    echo '{"bench":"failover","trials":'"$trials"',"ok":0}'
    exit 1
fi
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
v = sorted(int(x) for x in sys.stdin.read().split())
trials = int(sys.argv[1])
print("failover (kill -9 -> next produce): min %d ms, median %d ms, max %d ms over %d/%d trials"
      % (v[0], statistics.median(v), v[-1], len(v), trials))
print(json.dumps({"bench": "failover", "trials": trials, "ok": len(v),
                  "min_ms": v[0], "median_ms": statistics.median(v),
                  "max_ms": v[-1], "samples_ms": v}))
' "$trials"
[ ${#results[@]} -eq "$trials" ]
