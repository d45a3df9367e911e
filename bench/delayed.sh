#!/usr/bin/env bash
# Delayed messages (docs/WORKQUEUES.md): what pending timers cost a node,
# and how close to its due time a message is appended. A 3-node cluster
# on loopback (scripts/cluster.sh).
#
#   bench/delayed.sh [--pending N] [--batch B] [--size S] [--precision P]
#                    [--delay D]
#
# 1. Pending: N (default 1,000,000) messages of S bytes (default 16) are
#    produced in batches of B (default 1000) with a delay of one day, so
#    they all stay pending; then every node's VmRSS (anonymous and file-
#    backed: LMDB's map and the log are file pages) and VmHWM (from
#    /proc/PID/status) and data directory bytes are printed.
# 2. Precision: P (default 2000) messages produced in batches of 100 with
#    --delay D (default 5s) are read back once due (bounded wait: the last
#    due time + 30 s); for each, append time minus due time (the due time
#    the leader answered, from the ack log) gives p50, p99 and max, with
#    the N timers of step 1 still pending. The timer pass runs every
#    [node] timer_interval_ms (default 100 ms).
#
# Binaries: TERN_BIN (default <repo>/build); use a release build for
# figures (cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -B build-rel;
# TERN_BIN=$PWD/build-rel). The cluster is stopped by PID (scripts/
# cluster.sh down) when the script ends, also on error.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
pending=1000000
batch=1000
size=16
precision=2000
delay=5s
while [ $# -gt 0 ]; do
    case "$1" in
    --pending) pending=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    *) echo "usage: $0 [--pending N] [--batch B] [--size S] [--precision P] [--delay D]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "delayed: $CLI not found (build first, or set TERN_BIN)" >&2; exit 1; }
[ "$pending" -ge 0 ] && [ "$pending" -le 20000000 ] || { echo "delayed: --pending 0..20000000" >&2; exit 2; }
[ "$batch" -ge 1 ] && [ "$batch" -le 100000 ] || { echo "delayed: --batch 1..100000" >&2; exit 2; }
[ "$precision" -ge 1 ] && [ "$precision" -le 1000000 ] || { echo "delayed: --precision 1..1000000" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-delaybench.XXXXXX")
dir=$work/cluster
base=$("$ROOT/scripts/cluster.sh" free-base)
cleanup() {
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$dir"
"$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" up >/dev/null
servers=$("$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" servers)
"$CLI" -s "$servers" queue create later >/dev/null
"$CLI" -s "$servers" queue create soon >/dev/null

memory() {
    for f in "$dir"/node*.pid; do
        i=$(basename "$f" .pid)
        pid=$(tr -dc '0-9' <"$f")
        [ -r "/proc/$pid/status" ] || continue
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
        hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
        anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")
        file=$(awk '/^RssFile:/ {print $2}' "/proc/$pid/status")
        disk=$(du -sb "$dir/$i" | awk '{print $1}')
        printf '  %s: VmRSS %d MiB (anon %d, file %d), VmHWM %d MiB, data dir %d MiB\n' \
            "$i" $((rss / 1024)) $((anon / 1024)) $((file / 1024)) \
            $((hwm / 1024)) $((disk >> 20))
    done
}

echo "delayed bench: $pending pending x $size B (batches of $batch, delay 1d), then $precision with --delay $delay"
echo "before:"
memory
if [ "$pending" -gt 0 ]; then
    t0=$(date +%s.%N)
    "$CLI" -s "$servers" --timeout-ms 60000 produce later --count "$pending" \
        --size "$size" --batch "$batch" --delay 1d --id-prefix p >/dev/null
    t1=$(date +%s.%N)
    awk -v n="$pending" -v a="$t0" -v b="$t1" \
        'BEGIN {printf "scheduled %d in %.1f s (%.0f msg/s)\n", n, b - a, n / (b - a)}'
fi
echo "with $pending pending:"
memory

acks=$work/acks.txt
"$CLI" -s "$servers" produce soon --count "$precision" --size "$size" \
    --batch 100 --delay "$delay" --ack-log "$acks" --id-prefix s >/dev/null
last_due=$(awk -F'\tdue=' '{print $2}' "$acks" | sort -n | tail -1)
deadline=$(( last_due / 1000 + 30 ))
got=0
while [ "$(date +%s)" -le "$deadline" ]; do
    got=$("$CLI" -s "$servers" consume soon --offset 0 --format '%p' | wc -l)
    [ "$got" -ge "$precision" ] && break
    sleep 1
done
[ "$got" -ge "$precision" ] || { echo "delayed: only $got of $precision fired by due + 30 s" >&2; exit 1; }
"$CLI" -s "$servers" consume soon --offset 0 --format '%p\t%T' >"$work/fired.txt"
# append - due per message (ids: the payload without its padding dots),
# sorted; then the quantiles (plain awk: no gawk extensions).
awk -F'\t' '
    NR == FNR { split($2, d, "="); due[$1] = d[2]; next }
    { id = $1; sub(/[.]+$/, "", id); if (id in due) print $2 - due[id] }
' "$acks" "$work/fired.txt" | sort -n >"$work/lag.txt"
awk '{ x[NR] = $1 }
    END {
        if (NR == 0) { print "no message matched"; exit 1 }
        i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
        i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
        printf "precision (append - due) over %d: p50 %d ms, p99 %d ms, max %d ms, min %d ms\n", NR, x[i50], x[i99], x[NR], x[1]
    }' "$work/lag.txt"
echo "after the precision batch:"
memory
