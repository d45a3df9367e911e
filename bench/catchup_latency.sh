#!/usr/bin/env bash
# Produce latency while a consumer catches up, and the consumer's rate,
# with FETCHes read on the loop thread ([limits] fetch_threads = 0) and on
# the thread pool with read-ahead (the default, 2). A 3-node cluster
# (scripts/cluster.sh, a temp dir on free ports) takes --count messages
# (default 2,000,000) of 128 B into queue "scale" (bench_scale produce).
# Then for --rounds rounds (default 3), each setting in turn, the cluster
# is restarted with that setting on the same data and:
#   1. one consumer reads the whole queue through the leader from a warm
#      page cache, 3 times (bench_scale consume, libtern's read-ahead on):
#      its rates;
#   2. the same consumer reads it in a loop (at most 12 passes) while
#      `tern bench --window 1` produces --seq messages (default 3000) of
#      1 KiB one at a time to another queue: their p50/p90/p99/max.
# Prints one line per round and setting, then one JSON line per setting
# with the medians over the rounds. Not a test: nothing is asserted on
# the figures (exit 1 only if the cluster or a tool fails).
#
#   bench/catchup_latency.sh [--count N] [--rounds R] [--seq N]
#
# Every process is started here and stopped by its PID (the consumer loop
# runs in a session of its own and is stopped by its process group, the
# nodes by scripts/cluster.sh down); the directory is
# removed at the end, also on error. Binaries: TERN_BIN (default
# <repo>/build).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BS=$TERN_BIN/bench/bench_scale
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
count=2000000
rounds=3
seq=3000
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--rounds R] [--seq N]" >&2; exit 2 ;;
    esac
done
[ -x "$BS" ] || { echo "catchup_latency: $BS not found (build first)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-catchup.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cluster() { "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" "$@"; }
loop=
cleanup() {
    [ -n "$loop" ] && kill -- "-$loop" 2>/dev/null || true
    cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cluster up >/dev/null
echo "catchup_latency: $count messages of 128 B, $rounds rounds, in $work"
timeout 1800 "$BS" produce -s "$(cluster servers)" --queue scale \
    --count "$count" --size 128 | tail -n 1
sleep 3 # followers apply the tail

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
declare -A rates p50s p90s p99s maxs
for r in $(seq 1 "$rounds"); do
    for ft in 0 2; do
        cluster down >/dev/null
        TERN_LIMITS_EXTRA="fetch_threads = $ft" cluster up >/dev/null
        leader=$(cluster leader)
        lead="127.0.0.1:$((base + leader))"
        rate=""
        for _ in 1 2 3; do
            x=$(timeout 120 "$BS" consume -s "$lead" --read-first --queue scale \
                --count "$count" | sed -n 's/.*consume_payload_mb_s=//p')
            rate="$rate $x"
        done
        # setsid: the loop leads its own process group, stopped whole
        setsid bash -c 'for _ in $(seq 1 12); do
            timeout 120 "$0" consume -s "$1" --read-first --queue scale \
                --count "$2" >/dev/null 2>&1 || true
        done' "$BS" "$lead" "$count" &
        loop=$!
        sleep 0.3
        out=$(timeout 300 "$CLI" -s "$(cluster servers)" bench "lat$r$ft" \
            --size 1024 --count "$seq" --window 1 | grep -m 1 'p50 .* p90 ')
        kill -- "-$loop" 2>/dev/null || true
        wait "$loop" 2>/dev/null || true
        loop=
        p50=$(sed -n 's/.*p50 \([0-9]*\) us.*/\1/p' <<<"$out")
        p90=$(sed -n 's/.*p90 \([0-9]*\) us.*/\1/p' <<<"$out")
        p99=$(sed -n 's/.*p99 \([0-9]*\) us.*/\1/p' <<<"$out")
        max=$(sed -n 's/.*max \([0-9]*\) us.*/\1/p' <<<"$out")
        echo "round $r fetch_threads=$ft: consumer MB/s of payload:$rate;" \
            "produce p50 $p50 p90 $p90 p99 $p99 max $max us"
        rates[$ft]="${rates[$ft]:-}$rate"
        p50s[$ft]="${p50s[$ft]:-} $p50"
        p90s[$ft]="${p90s[$ft]:-} $p90"
        p99s[$ft]="${p99s[$ft]:-} $p99"
        maxs[$ft]="${maxs[$ft]:-} $max"
    done
done
for ft in 0 2; do
    printf '{"bench":"catchup_latency","fetch_threads":%d,"count":%d,"rounds":%d,"consume_payload_mb_s":%s,"produce_p50_us":%s,"produce_p90_us":%s,"produce_p99_us":%s,"produce_max_us":%s}\n' \
        "$ft" "$count" "$rounds" "$(median <<<"${rates[$ft]}")" \
        "$(median <<<"${p50s[$ft]}")" "$(median <<<"${p90s[$ft]}")" \
        "$(median <<<"${p99s[$ft]}")" "$(median <<<"${maxs[$ft]}")"
done
