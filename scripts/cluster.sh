#!/usr/bin/env bash
# Runs a local tern cluster of 3 nodes (or TERN_NODES) on loopback.
#
#   scripts/cluster.sh [--dir DIR] [--base-port P] COMMAND
#
#   up          write configs, start every node, wait (bounded) for a
#               writable leader
#   down        SIGTERM every node by PID, SIGKILL after a timeout
#   status      per-node process state and `tern cluster status`; exits 1
#               when a node is down or not answering (named on stderr)
#   kill N      kill -9 node N (PID from its pid file)
#   start N     start node N (with its config from `up`, if there is one)
#   restart N   stop node N (SIGTERM, then SIGKILL) and start it again
#   leader      print the number of the writable leader (waits up to
#               TERN_LEADER_WAIT s, default 10; exit 1 if none)
#   servers     print the client addresses, comma separated
#   free-base   print a base port P in 20000..32500 whose six ports are
#               free on 127.0.0.1 now (for scripts that start clusters
#               side by side); needs no DIR
#
# Node i (1..3): client port P+i, raft port P+100+i (P defaults to 7400:
# 7401-7403 and 7501-7503). DIR (default ./tern-cluster) holds nodeN.ini,
# nodeN.log, nodeN.pid, the data dirs nodeN/ and the cluster's credentials
# in certs/ (made once with scripts/tern-certs.sh: nodes authenticate each
# other with mutual TLS; TERN_PEER_AUTH=none runs without). Processes are only ever
# signalled by the PID in their pid file, after checking that the PID still
# runs ternd with that node's config.
#
# Environment: TERN_NODES (1..3, default 3: nodes of the cluster; give the
# same value to every command on one DIR), TERN_BIN (build dir, default
# <repo>/build), or TERND and
# TERN_CLI for the binaries themselves; TERN_ELECTION_TIMEOUT_MS (150),
# TERN_HEARTBEAT_MS (15), TERN_LOG_LEVEL (info), TERN_RAFT_EXTRA and
# TERN_NODE_EXTRA (extra "key = value" lines, newline separated, for the
# [raft] and [node] sections), TERN_LIMITS_EXTRA (the same, for a [limits]
# section: max_connections, ...), TERN_UP_TIMEOUT (15 s), TERN_PEER_AUTH
# (tls), TERN_SECURITY_EXTRA (extra [security] lines: client_tls,
# client_auth, bootstrap_admin, ...). With `client_tls = on` there, the
# script's own status probes speak TLS and verify the nodes with
# certs/ca.pem (status needs no login, so client_auth does not matter).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TERN_BIN=${TERN_BIN:-$ROOT/build}
TERND=${TERND:-$TERN_BIN/node/ternd}
TERN_CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
NODES=${TERN_NODES:-3}
case "$NODES" in
1 | 2 | 3) ;;
*) echo "cluster.sh: TERN_NODES must be 1, 2 or 3" >&2; exit 2 ;;
esac

dir=./tern-cluster
base=7400
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --dir) dir=$2; shift 2 ;;
    --dir=*) dir=${1#--dir=}; shift ;;
    --base-port) base=$2; shift 2 ;;
    --base-port=*) base=${1#--base-port=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
    esac
done
set -- "${args[@]+"${args[@]}"}"
cmd=${1:-}
if [ "$cmd" = free-base ]; then
    exec python3 -c '
import random, socket, sys
for _ in range(200):
    p = random.randrange(20000, 32500, 10)
    try:
        for port in (p + 1, p + 2, p + 3, p + 101, p + 102, p + 103):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        print(p)
        break
    except OSError:
        pass
else:
    sys.exit("cluster: no free base port found")'
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

die() { echo "cluster: $*" >&2; exit 1; }
# client_addr, probe_cli, node_state
# shellcheck source=scripts/lib-cluster.sh
. "$ROOT/scripts/lib-cluster.sh"
raft_addr() { echo "127.0.0.1:$((base + 100 + $1))"; }
servers() {
    local i out=
    for i in $(seq 1 $NODES); do out=${out:+$out,}$(client_addr "$i"); done
    echo "$out"
}
check_node() {
    if ! [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || [ "$1" -gt $NODES ]; then
        die "node number must be 1..$NODES, got '${1:-}'"
    fi
}

write_config() { # i
    local i=$1 p
    mkdir -p -m 700 "$dir/node$i"
    # Once per cluster dir (existing files are kept).
    "$ROOT/scripts/tern-certs.sh" "$dir/certs" $(seq 1 $NODES) >/dev/null
    {
        echo "[node]"
        echo "id = $i"
        echo "data_dir = $dir/node$i"
        echo "client_addr = $(client_addr "$i")"
        echo "raft_addr = $(raft_addr "$i")"
        echo "log_level = ${TERN_LOG_LEVEL:-info}"
        [ -n "${TERN_NODE_EXTRA:-}" ] && printf '%s\n' "$TERN_NODE_EXTRA"
        echo
        echo "[raft]"
        echo "election_timeout_ms = ${TERN_ELECTION_TIMEOUT_MS:-150}"
        echo "heartbeat_ms = ${TERN_HEARTBEAT_MS:-15}"
        [ -n "${TERN_RAFT_EXTRA:-}" ] && printf '%s\n' "$TERN_RAFT_EXTRA"
        echo
        echo "[security]"
        echo "peer_auth = ${TERN_PEER_AUTH:-tls}"
        echo "cluster_ca = $dir/certs/ca.pem"
        echo "node_cert = $dir/certs/node$i.pem"
        echo "node_key = $dir/certs/node$i.key"
        echo "cluster_secret_file = $dir/certs/cluster.secret"
        [ -n "${TERN_SECURITY_EXTRA:-}" ] && printf '%s\n' "$TERN_SECURITY_EXTRA"
        if [ -n "${TERN_LIMITS_EXTRA:-}" ]; then
            echo
            echo "[limits]"
            printf '%s\n' "$TERN_LIMITS_EXTRA"
        fi
        echo
        echo "[peers]"
        for p in $(seq 1 $NODES); do
            echo "$p = $(raft_addr "$p"),$(client_addr "$p")"
        done
    } >"$dir/node$i.ini"
}

# PID of node i if it is running ternd with our config, else nothing.
node_pid() { # i
    local f=$dir/node$1.pid pid
    [ -s "$f" ] || return 0
    pid=$(tr -dc '0-9' <"$f")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/node$1.ini"; then
        # A zombie is not running.
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || echo "$pid"
    fi
}

start_node() { # i
    local i=$1 pid spawned
    pid=$(node_pid "$i")
    if [ -n "$pid" ]; then
        echo "node $i already running (pid $pid)"
        return 0
    fi
    [ -x "$TERND" ] || die "ternd not found at $TERND (build first, or set TERN_BIN/TERND)"
    # `up` writes every config; start/restart keep the one there, so a
    # restarted node runs with the settings the cluster came up with (or
    # with what the caller edited in), not with this shell's environment.
    [ "${2:-}" = keep ] && [ -s "$dir/node$i.ini" ] || write_config "$i"
    rm -f "$dir/node$i.pid"
    # setsid: the node must not share our process group (Ctrl-C in the
    # caller's terminal must not reach it; `down` stops it).
    setsid "$TERND" --config "$dir/node$i.ini" --pid-file "$dir/node$i.pid" \
        </dev/null >>"$dir/node$i.log" 2>&1 &
    spawned=$!
    # ternd writes its pid file at start; wait for it (bounded), and write
    # it ourselves if ternd is up but has not.
    for _ in $(seq 1 50); do
        [ -s "$dir/node$i.pid" ] && break
        kill -0 "$spawned" 2>/dev/null || break
        sleep 0.1
    done
    if ! kill -0 "$spawned" 2>/dev/null; then
        echo "node $i exited at start; last log lines ($dir/node$i.log):" >&2
        tail -n 20 "$dir/node$i.log" >&2
        return 1
    fi
    [ -s "$dir/node$i.pid" ] || echo "$spawned" >"$dir/node$i.pid"
    echo "node $i started (pid $(tr -dc '0-9' <"$dir/node$i.pid"), client $(client_addr "$i"), raft $(raft_addr "$i"))"
}

# Signal node i by PID; with a timeout, wait for it to exit and escalate to
# SIGKILL. Returns 0 once it is gone.
stop_node() { # i signal timeout_s
    local i=$1 sig=$2 timeout=$3 pid
    pid=$(node_pid "$i")
    if [ -z "$pid" ]; then
        echo "node $i not running"
        rm -f "$dir/node$i.pid"
        return 0
    fi
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((timeout * 10))); do
        [ -n "$(node_pid "$i")" ] || break
        sleep 0.1
    done
    if [ -n "$(node_pid "$i")" ]; then
        echo "node $i (pid $pid) still running after ${timeout}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            [ -n "$(node_pid "$i")" ] || break
            sleep 0.1
        done
    fi
    [ -z "$(node_pid "$i")" ] || die "node $i (pid $pid) did not exit"
    rm -f "$dir/node$i.pid"
    echo "node $i stopped (pid $pid, SIG$sig)"
}

leader_once() {
    local i st
    for i in $(seq 1 $NODES); do
        [ -n "$(node_pid "$i")" ] || continue
        st=$(node_state "$i")
        if [ "${st%% *}" = leader ] && [ "$(echo "$st" | awk '{print $2}')" = 1 ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

wait_leader() { # timeout_s
    local deadline=$(($(date +%s%N) + $1 * 1000000000))
    while [ "$(date +%s%N)" -lt "$deadline" ]; do
        leader_once && return 0
        sleep 0.1
    done
    return 1
}

case "$cmd" in
up)
    [ -x "$TERN_CLI" ] || die "tern CLI not found at $TERN_CLI"
    for i in $(seq 1 $NODES); do start_node "$i"; done
    if ! l=$(wait_leader "${TERN_UP_TIMEOUT:-15}"); then
        echo "cluster: no writable leader after ${TERN_UP_TIMEOUT:-15}s; log tails:" >&2
        for i in $(seq 1 $NODES); do
            echo "--- node $i ---" >&2
            tail -n 10 "$dir/node$i.log" >&2 || true
        done
        exit 1
    fi
    echo "cluster up in $dir: leader node $l"
    echo "export TERN_SERVERS=$(servers)"
    ;;
down)
    rc=0
    for i in $(seq 1 $NODES); do stop_node "$i" TERM "${TERN_STOP_TIMEOUT:-10}" || rc=1; done
    exit $rc
    ;;
status)
    # Exit status: 0 when every node runs and answers, 1 otherwise (the
    # last line names the nodes that are down or not answering).
    down=""
    for i in $(seq 1 $NODES); do
        pid=$(node_pid "$i")
        if [ -n "$pid" ]; then
            st=$(node_state "$i")
            if [ -n "$st" ]; then
                # shellcheck disable=SC2086
                set -- $st
                st="role=$1 writable=$2 last_applied=$3 commit_index=$4 leader=$5"
            else
                down="$down $i"
            fi
            echo "node $i: pid $pid, client $(client_addr "$i"): ${st:-not answering}"
        else
            echo "node $i: not running"
            down="$down $i"
        fi
    done
    probe_cli -s "$(servers)" --timeout-ms 2000 cluster status || true
    if [ -n "$down" ]; then
        echo "cluster: node(s)$down down or not answering" >&2
        exit 1
    fi
    ;;
kill)
    check_node "${2:-}"
    stop_node "$2" KILL 5
    ;;
start)
    check_node "${2:-}"
    start_node "$2" keep
    ;;
restart)
    check_node "${2:-}"
    stop_node "$2" TERM "${TERN_STOP_TIMEOUT:-10}"
    start_node "$2" keep
    ;;
leader)
    wait_leader "${TERN_LEADER_WAIT:-10}" || die "no writable leader"
    ;;
servers)
    servers
    ;;
*)
    echo "usage: $0 [--dir DIR] [--base-port P] up|down|status|kill N|start N|restart N|leader|servers" >&2
    exit 2
    ;;
esac
