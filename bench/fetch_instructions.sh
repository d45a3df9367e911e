#!/usr/bin/env bash
# Instructions a node spends serving a consumer, counted by callgrind: a
# figure that a shared, noisy machine does not move (wall-clock rates of
# the same build vary by 2x there), for comparing builds of the read path.
# Not a test: nothing is asserted on the figures.
#
#   bench/fetch_instructions.sh [--count N] [--size S] [--passes P]
#
# A one-node cluster (scripts/cluster.sh, a temp dir on free ports) takes
# N messages (default 200,000) of S bytes (default 128) into one queue
# (bench_scale produce) and is stopped. ternd then runs again under
# valgrind --tool=callgrind (index_map_bytes 4G: valgrind cannot reserve
# the default map) with collection on inside the read path only: the
# pool's fetch job (fetch_in: LMDB rows, commit-log records read and
# checksummed, the answer framed) and its delivery on the loop. A consumer
# (bench_scale consume --read-first) reads the whole queue P times
# (default 2). Prints the instructions counted per message, the top
# functions, the build, and one JSON line. The kernel's copies (pread,
# send) are outside callgrind's view.
#
# Binaries: TERN_BIN (default <repo>/build, RelWithDebInfo). Needs
# valgrind. Every process is started here and stopped by its PID (the
# cluster by scripts/cluster.sh down, valgrind's ternd by SIGTERM); the
# loads are bounded by count and by `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BS=$TERN_BIN/bench/bench_scale
TERND=$TERN_BIN/node/ternd
count=200000
size=128
passes=2
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    *) sed -n '7p' "$0" | sed 's/^# \{0,1\}/usage: /' >&2; exit 2 ;;
    esac
done
[ -x "$BS" ] && [ -x "$TERND" ] || {
    echo "fetch_instructions: $BS or $TERND not found (make build)" >&2
    exit 1
}
command -v valgrind >/dev/null || {
    echo "fetch_instructions: valgrind not found (apt-get install valgrind)" >&2
    exit 1
}
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$TERN_BIN/CMakeCache.txt" 2>/dev/null)
# The commit of the tree TERN_BIN was built from.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$TERN_BIN/CMakeCache.txt" 2>/dev/null)
src=${src:-$ROOT}
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$src" diff --quiet HEAD -- . 2>/dev/null || commit="$commit+changes"

export TERN_NODES=1
work=$(mktemp -d "${TMPDIR:-/tmp}/tern-fetchir.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
addr=127.0.0.1:$((base + 1))
vg=
cluster() { "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" "$@"; }
cleanup() {
    if [ -n "$vg" ] && kill -0 "$vg" 2>/dev/null; then
        kill -TERM "$vg" 2>/dev/null || true
        for _ in $(seq 1 300); do kill -0 "$vg" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$vg" 2>/dev/null || true
    fi
    cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'trap - EXIT; cleanup; exit 130' INT TERM

cluster up >/dev/null
timeout 600 "$BS" produce -s "$addr" --queue scale --count "$count" \
    --size "$size" | tail -n 1
cluster down >/dev/null

out=$work/callgrind.out
valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect=fetch_in --toggle-collect=fetch_job_deliver \
    "$TERND" --config "$work/node1.ini" --index-map-bytes 4G \
    >"$work/ternd.log" 2>&1 &
vg=$!
up=0
for _ in $(seq 1 240); do
    if "$TERN_BIN/cli/tern" -s "$addr" queue list >/dev/null 2>&1; then
        up=1
        break
    fi
    sleep 0.5
done
[ "$up" = 1 ] || { echo "fetch_instructions: ternd under valgrind did not serve" >&2; tail -n 5 "$work/ternd.log" >&2; exit 1; }
for _ in $(seq 1 "$passes"); do
    timeout 600 "$BS" consume -s "$addr" --read-first --queue scale \
        --count "$count" | tail -n 1
done
kill -TERM "$vg"
wait "$vg" || true
vg=
total=$(callgrind_annotate "$out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
msgs=$((count * passes))
echo "build: $commit ($build_type)"
echo "read path: $total instructions for $msgs messages of $size B: $((total / msgs)) a message"
callgrind_annotate "$out" 2>/dev/null | grep -E '^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]' |
    grep -v 'PROGRAM TOTALS' | head -n 10 || true
printf '{"bench":"fetch_instructions","commit":"%s","count":%d,"size":%d,"passes":%d,"instructions":%s,"per_message":%d}\n' \
    "$commit" "$count" "$size" "$passes" "$total" "$((total / msgs))"
