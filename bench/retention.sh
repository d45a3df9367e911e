#!/usr/bin/env bash
# What retention costs a producer, and how the disk behaves under it: a
# 3-node cluster on loopback (scripts/cluster.sh) with small commit-log
# segments (--segment, also the checkpoint interval) and frequent raft
# snapshots (--snapshot), so that segments are deleted all the time.
#
#   bench/retention.sh [--count N] [--trials T] [--segment BYTES]
#                      [--snapshot BYTES] [--max-bytes BYTES]
#
# 1. Throughput: `tern bench` (1 KiB, window 256) into a queue without
#    retention limits ("keep") and into one with max_bytes ("ring", drop
#    oldest: the leader trims after every flush and the segments behind
#    it are deleted at each snapshot). Each trial runs on a fresh cluster,
#    the two queues alternating; medians are printed.
# 2. Disk over time: on one more fresh cluster, 10 x max_bytes is
#    produced into "ring" while the bytes of every node's data directory
#    (commit log, checkpoints, LMDB, raft log) are sampled every 0.5 s;
#    prints the series and the peak per node.
#
# Binaries: TERN_BIN (default <repo>/build); use a release build for
# figures (cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -B build-rel;
# TERN_BIN=$PWD/build-rel). Clusters are stopped by PID (scripts/cluster.sh
# down) when the script ends, also on error.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
count=200000
trials=3
segment=$((4 << 20))
snapshot=$((16 << 20))
max_bytes=$((32 << 20))
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --segment) segment=$2; shift 2 ;;
    --snapshot) snapshot=$2; shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--trials T] [--segment B] [--snapshot B] [--max-bytes B]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "retention: $CLI not found (build first, or set TERN_BIN)" >&2; exit 1; }
[ "$count" -ge 1000 ] && [ "$count" -le 20000000 ] || { echo "retention: --count 1000..20000000" >&2; exit 2; }
[ "$trials" -ge 1 ] && [ "$trials" -le 20 ] || { echo "retention: --trials 1..20" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-retbench.XXXXXX")
dir=
base=$("$ROOT/scripts/cluster.sh" free-base)
cleanup() {
    [ -n "$dir" ] && "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

export TERN_NODE_EXTRA="log_segment_bytes = $segment"
export TERN_RAFT_EXTRA="snapshot_threshold_bytes = $snapshot"

up() { # name
    dir=$work/$1
    mkdir -p "$dir"
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" up >/dev/null
    servers=$("$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" servers)
}
down() {
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null
    rm -rf "$dir"
    dir=
}

# Bytes of node i's data directory.
node_bytes() { du -sb "$dir/node$1" 2>/dev/null | awk '{print $1}'; }

echo "retention bench: $count x 1 KiB, window 256, segment $segment, snapshot every $snapshot, ring max_bytes $max_bytes"
for t in $(seq 1 "$trials"); do
    for q in keep ring; do
        up "$q-$t"
        if [ "$q" = ring ]; then
            "$CLI" -s "$servers" queue create ring --max-bytes "$max_bytes" \
                --max-age 0 >/dev/null
        else
            "$CLI" -s "$servers" queue create keep --max-age 0 >/dev/null
        fi
        json=$("$CLI" -s "$servers" bench "$q" --size 1024 --count "$count" \
            --window 256 --json 2>/dev/null)
        rate=$(printf '%s' "$json" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["msgs_per_s"]))')
        peak=0
        for i in 1 2 3; do
            b=$(node_bytes "$i")
            [ "$b" -gt "$peak" ] && peak=$b
        done
        printf '%-5s trial %d: %8s msg/s, largest data dir after %s bytes\n' \
            "$q" "$t" "$rate" "$peak"
        echo "$q $rate $peak" >>"$work/results"
        down
    done
done

echo
echo "disk over time: 10 x max_bytes into ring (bytes per node every 0.5 s)"
up disk
"$CLI" -s "$servers" queue create ring --max-bytes "$max_bytes" --max-age 0 >/dev/null
n=$(( 10 * max_bytes / 1024 ))
"$CLI" -s "$servers" bench ring --size 1024 --count "$n" --window 256 \
    --json >"$work/disk.json" 2>/dev/null &
bpid=$!
t0=$(date +%s.%N)
while kill -0 "$bpid" 2>/dev/null; do
    now=$(date +%s.%N)
    printf '%6.1f s' "$(echo "$now - $t0" | bc)" >>"$work/series"
    for i in 1 2 3; do printf ' %s' "$(node_bytes "$i")" >>"$work/series"; done
    echo >>"$work/series"
    sleep 0.5
done
wait "$bpid" || true
sleep 3 # the last trims and a snapshot
printf '%6s  %s\n' "after" "$(for i in 1 2 3; do printf '%s ' "$(node_bytes "$i")"; done)" >>"$work/series"
cat "$work/series"
down

echo
python3 - "$work/results" "$work/series" "$max_bytes" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    q, rate, peak = line.split()
    rows.setdefault(q, []).append((int(rate), int(peak)))
k = statistics.median(r for r, _ in rows["keep"])
g = statistics.median(r for r, _ in rows["ring"])
print("median msg/s: keep %d, ring %d (ring/keep %.3f)" % (k, g, g / k))
peak = 0
for line in open(sys.argv[2]):
    f = line.split()
    vals = [int(x) for x in f[2:] if x.isdigit()] if f[1] == "s" else \
        [int(x) for x in f[1:] if x.isdigit()]
    peak = max([peak] + vals)
print("disk: peak data dir %d bytes = %.2f x max_bytes" %
      (peak, peak / float(sys.argv[3])))
EOF
