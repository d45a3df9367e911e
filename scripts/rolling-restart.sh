#!/usr/bin/env bash
# Restarts every node of a cluster started by scripts/cluster.sh, one at a
# time, without stopping the service:
#
#   scripts/rolling-restart.sh [--dir DIR] [--base-port P]
#
# Order: the followers first (by node number), the leader last. Before the
# leader is stopped its leadership is handed over (`tern cluster transfer`;
# ternd would also hand over on SIGTERM, this makes it explicit and
# checked). Each node is stopped by the PID in its pid file (SIGTERM, then
# SIGKILL after TERN_STOP_TIMEOUT s: scripts/cluster.sh restart), started
# again with its config, and the next node waits until this one answers,
# knows the leader and has applied what the leader had committed when it
# came back (`tern cluster status`), at most TERN_CATCH_UP_TIMEOUT s (60).
# Exit 0 when every node came back caught up, 1 otherwise (the remaining
# nodes are then left alone).
#
# Use the same DIR and base port as scripts/cluster.sh up; the environment
# is cluster.sh's (TERN_BIN, TERND, TERN_CLI, TERN_SECURITY_EXTRA, ...).
# For an upgrade, install the new ternd first (docs/OPERATIONS.md,
# "Upgrades"): each node restarts on the binary TERND points to.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TERN_BIN=${TERN_BIN:-$ROOT/build}
TERN_CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
export TERN_BIN TERN_CLI
NODES=3

dir=./tern-cluster
base=7400
while [ $# -gt 0 ]; do
    case "$1" in
    --dir) dir=$2; shift 2 ;;
    --dir=*) dir=${1#--dir=}; shift ;;
    --base-port) base=$2; shift 2 ;;
    --base-port=*) base=${1#--base-port=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--dir DIR] [--base-port P]" >&2; exit 2 ;;
    esac
done
[ -d "$dir" ] || { echo "rolling-restart: no cluster directory $dir" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
cluster() { "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" "$@"; }
say() { echo "rolling-restart: $*"; }
# client_addr, probe_cli, node_state
# shellcheck source=scripts/lib-cluster.sh
. "$ROOT/scripts/lib-cluster.sh"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Wait until node i answers, knows a leader and has applied the leader's
# commit index as of then.
wait_caught_up() { # i
    local i=$1 t0 deadline st lid target applied
    t0=$(now_ms)
    deadline=$((t0 + ${TERN_CATCH_UP_TIMEOUT:-60} * 1000))
    while :; do
        st=$(node_state "$i")
        lid=$(echo "$st" | awk '{print $5}')
        [ -n "$st" ] && [ "${lid:-0}" != 0 ] && break
        [ "$(now_ms)" -lt "$deadline" ] || { say "node $i not back"; return 1; }
        sleep 0.1
    done
    target=$(node_state "$lid" | awk '{print $4}')
    while :; do
        applied=$(node_state "$i" | awk '{print $3}')
        [ -n "$applied" ] && [ "$applied" -ge "${target:-0}" ] && break
        [ "$(now_ms)" -lt "$deadline" ] ||
            { say "node $i applied ${applied:-?} < $target"; return 1; }
        sleep 0.1
    done
    say "node $i back and caught up (applied $applied >= $target, leader $lid, $(($(now_ms) - t0)) ms)"
}

leader=$(cluster leader) || { say "no writable leader, nothing restarted" >&2; exit 1; }
order=""
for i in $(seq 1 $NODES); do [ "$i" = "$leader" ] || order="$order $i"; done
order="$order $leader"
say "leader is node $leader; order:$order"
servers=$(cluster servers)
for i in $order; do
    if [ "$i" = "$leader" ]; then
        t0=$(now_ms)
        if out=$(probe_cli -s "$servers" --timeout-ms 10000 cluster transfer 2>&1); then
            say "node $i handed leadership over ($out, $(($(now_ms) - t0)) ms)"
        else
            say "transfer failed ($out); SIGTERM hands over instead"
        fi
    fi
    cluster restart "$i" | sed 's/^/rolling-restart: /'
    wait_caught_up "$i" || exit 1
done
say "all $NODES nodes restarted"
