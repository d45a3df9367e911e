#!/usr/bin/env bash
# Shared consumption with acks (docs/WORKQUEUES.md, "Shared groups")
# against produce alone, and produce-to-delivery latency: a fresh 3-node
# cluster on loopback (scripts/cluster.sh) and bench_shared (bench/shared.c
# says what each phase does and prints).
#
#   bench/shared.sh [--count N] [--size S] [--consumers C] [--batch B]
#                   [--produce-batch P] [--window W] [--rate R]
#                   [--paced-count M] [--wait-ms T] [--timeout-s X]
#                   [--phases abc]
#
# Defaults: 200,000 messages of 1024 bytes in produce batches of 16 with
# 32 in flight; 4 consumers receiving up to 256 each and acking every
# answer; then 10,000 messages paced at 1,000 msg/s for the latency
# without queueing. Every phase is bounded by --timeout-s (default 300).
#
# Binaries: TERN_BIN (default <repo>/build); use a release build for
# figures (cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -B build-rel;
# TERN_BIN=$PWD/build-rel). The cluster is stopped by PID (scripts/
# cluster.sh down) when the script ends, also on error. With
# TERN_KEEP_LEADER_PID=FILE the leader's PID is written to FILE while the
# phases run (to profile it, e.g. perf top -p).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BS=$TERN_BIN/bench/bench_shared
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --count | --size | --consumers | --batch | --produce-batch | --window | \
        --rate | --paced-count | --wait-ms | --timeout-s | --phases)
        [ $# -ge 2 ] || { echo "shared: $1 needs a value" >&2; exit 2; }
        args+=("$1" "$2"); shift 2 ;;
    *) echo "usage: $0 [--count N] [--size S] [--consumers C] [--batch B] [--produce-batch P] [--window W] [--rate R] [--paced-count M] [--wait-ms T] [--timeout-s X] [--phases abc]" >&2; exit 2 ;;
    esac
done
[ -x "$BS" ] || { echo "shared: $BS not found (build first, or set TERN_BIN)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-sharedbench.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cleanup() {
    "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" up >/dev/null
servers=$("$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" servers)
if [ -n "${TERN_KEEP_LEADER_PID:-}" ]; then
    leader=$("$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" leader)
    tr -dc '0-9' <"$work/node$leader.pid" >"$TERN_KEEP_LEADER_PID"
fi
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BS" -s "$servers" "${args[@]}"
echo "host after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
