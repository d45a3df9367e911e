#!/usr/bin/env bash
# Many messages in one queue: a fresh cluster on loopback
# (scripts/cluster.sh, --nodes of them, default 3) takes --count messages
# (default 100,000,000) of --size bytes (default 128) into one queue
# (bench_scale produce: async batches, the rate of every 5% printed, the
# first and the last compared). Then a consumer catches up from a cold
# page cache: every file of the leader's data directory is dropped from
# the page cache (posix_fadvise DONTNEED, those files only: the rest of
# the machine's cache is left alone), the sequential read floor of the
# disk is measured on the leader's commit-log segments with O_DIRECT (dd
# iflag=direct, bs 4 MiB: no page cache involved), the files are dropped
# again, and bench_scale consume reads the whole queue from offset 0
# through the leader. Prints the consumer's rate in commit-log bytes per
# second against the floor, then reads the queue again from a warm cache
# (the consumer's own ceiling), and one JSON line.
#
# Before all that, the queue is read once from the page cache the produce
# left warm: the leader's first read since it started. That read also
# pays the first touch of ternd's heap at the size its fetch answers need
# (a page fault every 4 KiB, each tens of microseconds under a
# hypervisor); its rate, and the leader's page faults and CPU time of each
# read (/proc/PID/stat), are printed beside the others, so the cold
# cache's cost and the process's first touch each have their own figure.
#
#   bench/scale_messages.sh [--count N] [--size S] [--nodes 1|2|3]
#                           [--max-minutes M]
#
# Disk: each node holds the commit log (size + 4 bytes a message when
# produced in batches: 13.2 GB for 100 M of 128 B), its LMDB index (about
# 60 bytes a message) and the raft log, trimmed at each snapshot (under
# 1 GB). The estimate is size + 80 bytes a message and 1 GB a node: 100 M
# messages of 128 B on 3 nodes need about 65 GB. The
# script refuses to start when the estimate does not fit in the free
# space of TMPDIR with 10% to spare. --max-minutes (default 120) bounds
# the produce phase (bench_scale is stopped by PID, the run fails). The
# cluster is stopped by PID and its directory removed at the end, also on
# error. Binaries: TERN_BIN (default <repo>/build; use RelWithDebInfo).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BS=$TERN_BIN/bench/bench_scale
count=100000000
size=128
nodes=3
max_min=120
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --max-minutes) max_min=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--size S] [--nodes 1|2|3] [--max-minutes M]" >&2; exit 2 ;;
    esac
done
[ -x "$BS" ] || { echo "scale_messages: $BS not found (build first, or set TERN_BIN)" >&2; exit 1; }
export TERN_NODES=$nodes

tmp=${TMPDIR:-/tmp}
need=$(((count * (size + 80) + 1000000000) * nodes))
free=$(($(df -B1 --output=avail "$tmp" | tail -n 1)))
if [ $((need + need / 10)) -gt "$free" ]; then
    echo "scale_messages: about $((need / 1000000000)) GB needed, $((free / 1000000000)) GB free in $tmp" >&2
    exit 1
fi

work=$(mktemp -d "$tmp/tern-scalem.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cluster() { "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" "$@"; }
producer=
cleanup() {
    [ -n "$producer" ] && kill "$producer" 2>/dev/null || true
    cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Drop the page cache of every file under $1 (those files only).
drop_cache() {
    python3 - "$1" <<'EOF'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        try:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
EOF
}

cluster up >/dev/null
all=$(cluster servers)
echo "scale_messages: $count messages of $size B, $nodes node(s), in $work"
"$BS" produce -s "$all" --queue scale --count "$count" --size "$size" \
    >"$work/produce.out" &
producer=$!
deadline=$(($(date +%s) + max_min * 60))
while kill -0 "$producer" 2>/dev/null; do
    if [ "$(date +%s)" -gt "$deadline" ]; then
        echo "scale_messages: produce did not end within $max_min min" >&2
        exit 1
    fi
    sleep 5
done
wait "$producer"
producer=
cat "$work/produce.out"
sleep 3 # followers apply the tail
leader=$(cluster leader)
ld=$work/node$leader
lpid=$(cat "$work/node$leader.pid")
# The leader's minor page faults and CPU time since the last call, printed
# for the read named by $1 (none: only start counting); the faults also
# in $faults.
hz=$(getconf CLK_TCK)
last_flt=0 last_cpu=0 faults=0
leader_cost() {
    local st flt cpu
    st=$(sed 's/^.*) //' "/proc/$lpid/stat") # the fields from state on
    flt=$(echo "$st" | awk '{print $8}')
    cpu=$(echo "$st" | awk '{print $12 + $13}')
    if [ -n "${1:-}" ]; then
        faults=$((flt - last_flt))
        echo "leader during the $1 read: $faults page faults, $(((cpu - last_cpu) * 1000 / hz)) ms of CPU"
    fi
    last_flt=$flt last_cpu=$cpu
}
segs=$(find "$ld/index/log" -name '*.seg' | sort)
log_bytes=$(du -cb $segs | tail -n 1 | awk '{print $1}')
for i in $(seq 1 "$nodes"); do
    printf 'node %d data dir: %d MB (commit log %d MB, lmdb %d MB, raft %d MB)\n' "$i" \
        "$(($(du -sb "$work/node$i" | awk '{print $1}') / 1000000))" \
        "$(($(du -sb "$work/node$i/index/log" | awk '{print $1}') / 1000000))" \
        "$(($(du -sb "$work/node$i/index/lmdb" | awk '{print $1}') / 1000000))" \
        "$(($(du -sb "$work/node$i/raft" | awk '{print $1}') / 1000000))"
done

# The leader's first read since it started, from the page cache the
# produce left warm.
leader_cost
"$BS" consume -s "127.0.0.1:$((base + leader))" --read-first --queue scale \
    --count "$count" | sed 's/^consume:/consume (first read):/; s/consume_/first_consume_/g' |
    tee "$work/consume-first.out"
leader_cost first
faults_first=$faults

# The floor: the leader's segments read with O_DIRECT.
drop_cache "$ld"
t0=$(date +%s%N)
for s in $segs; do dd if="$s" of=/dev/null bs=4M iflag=direct status=none; done
floor_ns=$(($(date +%s%N) - t0))
floor=$(python3 -c "print(round($log_bytes / ($floor_ns / 1e9) / 1e6, 1))")
echo "floor: $((log_bytes / 1000000)) MB of commit log read with O_DIRECT in $((floor_ns / 1000000)) ms: $floor MB/s"

drop_cache "$ld"
t0=$(date +%s%N)
"$BS" consume -s "127.0.0.1:$((base + leader))" --read-first --queue scale \
    --count "$count" | tee "$work/consume.out"
cons_ns=$(($(date +%s%N) - t0))
cons=$(python3 -c "print(round($log_bytes / ($cons_ns / 1e9) / 1e6, 1))")
echo "consumer from a cold cache: $cons MB/s of commit log ($(python3 -c "print(round(100 * $cons / $floor))")% of the floor)"
leader_cost cold
faults_cold=$faults
# The same read again from a warm page cache: what the consumer does when
# the disk is not in the way.
"$BS" consume -s "127.0.0.1:$((base + leader))" --read-first --queue scale \
    --count "$count" | sed 's/^consume:/consume (warm cache):/; s/consume_/warm_consume_/g' |
    tee "$work/consume-warm.out"
leader_cost warm
faults_warm=$faults
sr=$(sed -n 's/^produce_start_rate=\([0-9]*\).*/\1/p' "$work/produce.out")
er=$(sed -n 's/.*produce_end_rate=\([0-9]*\).*/\1/p' "$work/produce.out")
ar=$(sed -n 's/.*produce_rate=\([0-9]*\)$/\1/p' "$work/produce.out")
pm=$(sed -n 's/.*consume_payload_mb_s=//p' "$work/consume.out")
wm=$(sed -n 's/.*warm_consume_payload_mb_s=//p' "$work/consume-warm.out")
fm=$(sed -n 's/.*first_consume_payload_mb_s=//p' "$work/consume-first.out")
printf '{"bench":"scale_messages","count":%d,"size":%d,"nodes":%d,"produce_start_rate":%s,"produce_end_rate":%s,"produce_rate":%s,"log_bytes":%d,"floor_mb_s":%s,"consume_log_mb_s":%s,"consume_payload_mb_s":%s,"warm_consume_payload_mb_s":%s,"first_consume_payload_mb_s":%s,"leader_faults_first":%d,"leader_faults_cold":%d,"leader_faults_warm":%d}\n' \
    "$count" "$size" "$nodes" "$sr" "$er" "$ar" "$log_bytes" "$floor" "$cons" "$pm" "$wm" "$fm" "$faults_first" "$faults_cold" "$faults_warm"
