#!/usr/bin/env bash
# Spurious elections under load: a 3-node cluster (scripts/cluster.sh, a
# fresh temp dir on free ports) with one libtern producer
# (bench_failover_gap: synchronous produces back to back) for N minutes
# (default 10, at most 60), nobody killed. Every 5 s each node's
# `tern cluster status --json` is read; at the end the script prints the
# terms seen, the number of term changes (each is an election) and of
# leader changes, the producer's longest gap between acknowledgements and
# its gaps over 100 ms, then one JSON line. Exit 0 whatever the count
# (it is a figure, not a test); 1 if the cluster or the producer failed.
#
#   bench/spurious.sh [--minutes N] [--size BYTES]
#
# The election timeout is the cluster's (TERN_ELECTION_TIMEOUT_MS, default
# 150, as scripts/cluster.sh writes it).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
GAP=${TERN_GAP_BIN:-$TERN_BIN/bench/bench_failover_gap}
minutes=10
size=256
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    *) echo "usage: $0 [--minutes N] [--size BYTES]" >&2; exit 2 ;;
    esac
done
case "$minutes" in
'' | *[!0-9]*) echo "spurious: --minutes must be 1..60" >&2; exit 2 ;;
esac
if [ "$minutes" -lt 1 ] || [ "$minutes" -gt 60 ]; then
    echo "spurious: --minutes must be 1..60" >&2
    exit 2
fi
for b in "$CLI" "$GAP"; do
    [ -x "$b" ] || { echo "spurious: $b not found (make build)" >&2; exit 1; }
done
ET=${TERN_ELECTION_TIMEOUT_MS:-150}

dir=$(mktemp -d "${TMPDIR:-/tmp}/tern-spurious.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cluster() { "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" "$@"; }
gap_pid=
cleanup() {
    if [ -n "$gap_pid" ]; then
        kill "$gap_pid" 2>/dev/null || true
        wait "$gap_pid" 2>/dev/null || true
    fi
    cluster down >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cluster up >/dev/null
ALL=$(cluster servers)
cluster leader >/dev/null

"$GAP" -s "$ALL" --seconds $((minutes * 60)) --size "$size" --gap-ms 100 \
    >"$dir/gap.txt" 2>&1 &
gap_pid=$!

# One sample: "time node role term leader" per answering node.
sample() {
    for i in 1 2 3; do
        "$CLI" -s "127.0.0.1:$((base + i))" --timeout-ms 1000 cluster status \
            --json 2>/dev/null | python3 -c 'import json, sys, time
try:
    j = json.load(sys.stdin)
    print(int(time.time()), sys.argv[1], j.get("role"), j.get("term"),
          j.get("leader_id"))
except Exception:
    pass' "$i" || true
    done
}

end=$(($(date +%s) + minutes * 60))
while [ "$(date +%s)" -lt "$end" ]; do
    sample >>"$dir/samples.txt"
    sleep 5
done
sample >>"$dir/samples.txt"
wait "$gap_pid" || true
gap_pid=

python3 - "$dir/samples.txt" "$dir/gap.txt" "$minutes" "$ET" <<'EOF'
import json, sys
samples, gaps, minutes, et = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
terms, leaders, last_leader = set(), 0, None
first = last = None
for line in open(samples):
    f = line.split()
    if len(f) != 5 or f[3] == "None":
        continue
    t = int(f[3])
    terms.add(t)
    first = t if first is None else min(first, t)
    last = t if last is None else max(last, t)
    if f[2] == "leader":
        if last_leader is not None and f[1] != last_leader:
            leaders += 1
        last_leader = f[1]
done, big = "", []
for line in open(gaps):
    if line.startswith("gap "):
        big.append(int(line.split()[2]))
    elif line.startswith("done "):
        done = line.strip()
if first is None or not done:
    print("spurious: no status samples or the producer failed:", done)
    sys.exit(1)
elections = last - first
print("spurious elections over %d min under load (election timeout %d ms): "
      "%d term changes (terms %s), %d leader changes; producer: %s; "
      "gaps > 100 ms: %s" % (minutes, et, elections, sorted(terms), leaders,
                             done, big or "none"))
print(json.dumps({"bench": "spurious", "minutes": minutes,
                  "election_timeout_ms": et, "term_changes": elections,
                  "leader_changes": leaders, "gaps_over_100ms": big,
                  "producer": done}))
EOF
