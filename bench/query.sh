#!/usr/bin/env bash
# Query by key and seek by time on a queue of many messages
# (docs/MESSAGES.md, "Query and seek"): a fresh 3-node cluster on loopback
# (scripts/cluster.sh), bench_query loads N keyed messages into one queue
# and then times random queries by key, by time and by offset through
# libtern (bench/query.c says what is checked).
#
#   bench/query.sh [--count N] [--keys K] [--size S] [--queries Q]
#
# Defaults: 10,000,000 messages of 100 bytes, 1,000,000 keys (10 messages
# per key), 20,000 queries of each kind. Prints the load rate, the
# latencies, and the bytes of every node's data directory after the load.
#
# Binaries: TERN_BIN (default <repo>/build); use a release build for
# figures (cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -B build-rel;
# TERN_BIN=$PWD/build-rel). The cluster is stopped by PID (scripts/
# cluster.sh down) when the script ends, also on error.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BQ=$TERN_BIN/bench/bench_query
count=10000000
keys=1000000
size=100
queries=20000
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --queries) queries=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--keys K] [--size S] [--queries Q]" >&2; exit 2 ;;
    esac
done
[ -x "$BQ" ] || { echo "query: $BQ not found (build first, or set TERN_BIN)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-querybench.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cleanup() {
    "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" up >/dev/null
servers=$("$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" servers)
echo "query bench: $count messages of $size bytes, $keys keys, $queries queries per kind"
"$BQ" -s "$servers" --count "$count" --keys "$keys" --size "$size" \
    --load-only
sleep 2 # followers apply the tail
for i in 1 2 3; do
    printf 'node %d data dir: %s bytes\n' "$i" \
        "$(du -sb "$work/node$i" | awk '{print $1}')"
done
"$BQ" -s "$servers" --count "$count" --keys "$keys" --queries "$queries" \
    --query-only
