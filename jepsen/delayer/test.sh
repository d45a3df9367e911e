#!/bin/bash
# Tests tern-delayer (root): two network namespaces on a veth pair, subnet
# 10.232.X.0/24 (blackholed in the root namespace), an iptables NFQUEUE rule
# with --queue-bypass in one of them.  Checks: UDP round-trip time goes from < 20 ms to
# the configured delay (within bounds, judged on the median), jitter reorders UDP datagrams, the
# queue limit drops, SIGTERM releases and exits 0, --seconds exits 0, and
# after the delayer is gone (SIGTERM or SIGKILL) traffic flows undelayed.
# Everything created is removed on exit (trap).
#   jepsen/delayer/test.sh [BUILD_OUT_DIR]    (default <repo>/build-jepsen/jepsen)
# Exit 0 if every check passed; last line "N passed, N failed".
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/../../build-jepsen/jepsen}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
make -s -C "$HERE" OUT="$OUT" >/dev/null || { echo "build failed"; exit 1; }
DELAYER=$OUT/tern-delayer
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces): SKIP"; exit 77; }
command -v iptables >/dev/null || { echo "needs iptables (apt-get install -y iptables)"; exit 1; }

PFX=tdl$(printf '%04x' $((RANDOM % 65536)))
NA=${PFX}a
NB=${PFX}b
for ((try = 0; try < 50; try++)); do
    X=$((RANDOM % 250 + 2))
    ip route show | grep -q "^[a-z ]*10\.232\.$X\." || break
done
NET=10.232.$X
A=$NET.1
B=$NET.2
Q=$((RANDOM % 1000 + 3000))
T=$(mktemp -d /tmp/tern-delayer-test.XXXXXX)
DPID=
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

EPID=
cleanup() {
    if [ -n "$EPID" ]; then
        kill "$EPID" 2>/dev/null
        wait "$EPID" 2>/dev/null
    fi
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -9 "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    ip netns del "$NA" 2>/dev/null
    ip netns del "$NB" 2>/dev/null
    ip route del blackhole "$NET.0/24" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Setup: blackhole first, so no mistake can leave the machine.
ip route add blackhole "$NET.0/24" || { echo "cannot add blackhole route"; exit 1; }
ip netns add "$NA" && ip netns add "$NB" &&
    ip link add "${PFX}va" netns "$NA" type veth peer name "${PFX}vb" netns "$NB" &&
    ip -n "$NA" addr add "$A/24" dev "${PFX}va" &&
    ip -n "$NB" addr add "$B/24" dev "${PFX}vb" &&
    ip -n "$NA" link set "${PFX}va" up && ip -n "$NB" link set "${PFX}vb" up &&
    ip -n "$NA" link set lo up && ip -n "$NB" link set lo up ||
    { echo "namespace setup failed"; exit 1; }

# rtt COUNT INTERVAL: prints "min avg max loss%" of UDP round trips A -> B
# (udp_rtt.py, ping-like; the VM has no ping binary).
rtt() {
    ip netns exec "$NA" python3 "$HERE/udp_rtt.py" probe "$B" 7777 "$1" "$2"
}

# in_range VALUE LO HI
in_range() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "none" && v >= lo && v <= hi) }'; }

# start_delayer ARGS...: starts it in B, waits (bounded) for "ready".
start_delayer() {
    ip netns exec "$NB" "$DELAYER" --queue "$Q" "$@" >"$T/d.out" 2>"$T/d.err" &
    DPID=$!
    for ((i = 0; i < 250; i++)); do
        grep -q '^ready' "$T/d.out" && return 0
        kill -0 "$DPID" 2>/dev/null || break
        sleep 0.02
    done
    echo "delayer did not start: $(cat "$T/d.err")"
    return 1
}

# stop_delayer SIGNAL: signals it, waits (bounded), sets RC to its status.
stop_delayer() {
    kill "-$1" "$DPID"
    for ((i = 0; i < 250; i++)); do
        kill -0 "$DPID" 2>/dev/null || break
        sleep 0.02
    done
    { wait "$DPID"; } 2>/dev/null
    RC=$?
    DPID=
}

ip netns exec "$NB" python3 "$HERE/udp_rtt.py" echo "$B" 7777 120 &
EPID=$!
for ((i = 0; i < 100; i++)); do
    ip netns exec "$NB" ss -uln | grep -q ":7777 " && break
    sleep 0.05
done
read -r mn avg mx loss med < <(rtt 5 0.2)
echo "  baseline RTT min/median/avg/max = $mn/$med/$avg/$mx ms, loss $loss%"
in_range "$med" 0 20 && ok baseline_rtt_below_20ms || ko baseline_rtt_below_20ms "median $med"

ip netns exec "$NB" iptables -A INPUT -s "$A" -j NFQUEUE --queue-num "$Q" --queue-bypass ||
    { ko nfqueue_rule "iptables failed"; echo "$pass passed, $fail failed"; exit 1; }
ok nfqueue_rule_added

# 1. Delay 100 ms, jitter 10 ms.  Hard bound: no packet is released early
#    (min >= 89 ms).  Typical: median within [90, 112] ms.  Gross upper bound
#    300 ms (single outliers from scheduling on a shared 2-core VM are fine).
if start_delayer --delay-ms 100 --jitter-ms 10 --seconds 60; then
    read -r mn avg mx loss med < <(rtt 10 0.2)
    echo "  delay 100 +- 10 ms: RTT min/median/avg/max = $mn/$med/$avg/$mx ms, loss $loss%"
    in_range "$mn" 89 300 && in_range "$mx" 89 300 && in_range "$med" 90 112 &&
        ok delayed_rtt_within_bounds || ko delayed_rtt_within_bounds "min/median/max $mn/$med/$mx"
    [ "$loss" = 0 ] && ok no_loss_while_delayed || ko no_loss_while_delayed "loss $loss%"
    stop_delayer TERM
    [ "$RC" -eq 0 ] && ok sigterm_exits_0 || ko sigterm_exits_0 "status $RC"
    grep -q 'received=10 accepted=10 dropped=0 ' "$T/d.err" &&
        ok stats_count_every_packet || ko stats_count_every_packet "$(cat "$T/d.err")"
    read -r mn avg mx loss med < <(rtt 5 0.2)
    echo "  after SIGTERM: RTT median $med ms, loss $loss%"
    in_range "$med" 0 20 && [ "$loss" = 0 ] && ok bypass_after_sigterm ||
        ko bypass_after_sigterm "median $med loss $loss%"
else
    ko delayer_starts "$(cat "$T/d.err")"
fi

# 2. Jitter reorders: 200 UDP datagrams 2 ms apart, delay 30 +- 20 ms.
if start_delayer --delay-ms 30 --jitter-ms 20 --seconds 60 --seed 7; then
    ip netns exec "$NB" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999)); s.settimeout(3)
got = []
try:
    while len(got) < 200:
        got.append(int(s.recv(64)))
except socket.timeout:
    pass
inv = sum(1 for a, b in zip(got, got[1:]) if b < a)
print(len(got), inv)' "$B" >"$T/udp.out" &
    RPID=$!
    for ((i = 0; i < 100; i++)); do
        ip netns exec "$NB" ss -uln | grep -q ":9999 " && break
        sleep 0.02
    done
    ip netns exec "$NA" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(200):
    s.sendto(str(i).encode(), (sys.argv[1], 9999)); time.sleep(0.002)' "$B"
    wait "$RPID"
    read -r got inv <"$T/udp.out"
    echo "  jitter: $got of 200 datagrams received, $inv inversions"
    [ "${got:-0}" -eq 200 ] && ok udp_all_delivered || ko udp_all_delivered "got ${got:-0}"
    [ "${inv:-0}" -gt 10 ] && ok jitter_reorders || ko jitter_reorders "inversions ${inv:-0}"
    stop_delayer TERM
fi

# 3. Queue limit: 5 pending at most, 300 ms delay, probes every 10 ms -> drops.
if start_delayer --delay-ms 300 --limit 5 --seconds 60; then
    read -r mn avg mx loss _ < <(rtt 50 0.01)
    stop_delayer TERM
    dropped=$(sed -n 's/.*dropped=\([0-9]*\).*/\1/p' "$T/d.err")
    maxp=$(sed -n 's/.*max_pending=\([0-9]*\).*/\1/p' "$T/d.err")
    echo "  limit 5: loss $loss%, delayer dropped=$dropped max_pending=$maxp"
    [ "${dropped:-0}" -gt 0 ] && [ "${maxp:-99}" -le 5 ] && in_range "$loss" 1 100 &&
        ok queue_limit_drops || ko queue_limit_drops "loss $loss% dropped $dropped max $maxp"
fi

# 4. SIGKILL: traffic keeps flowing (--queue-bypass), undelayed.
if start_delayer --delay-ms 200 --seconds 60; then
    stop_delayer KILL
    read -r mn avg mx loss med < <(rtt 5 0.2)
    echo "  after SIGKILL: RTT median $med ms, loss $loss%"
    in_range "$med" 0 20 && [ "$loss" = 0 ] && ok bypass_after_sigkill ||
        ko bypass_after_sigkill "median $med loss $loss%"
fi

# 5. --seconds: exits by itself with status 0 (bounded wait).
if start_delayer --delay-ms 10 --seconds 1; then
    for ((i = 0; i < 250; i++)); do
        kill -0 "$DPID" 2>/dev/null || break
        sleep 0.02
    done
    if kill -0 "$DPID" 2>/dev/null; then
        ko seconds_option_exits "still running after 5 s"
        stop_delayer KILL
    else
        wait "$DPID"
        RC=$?
        DPID=
        [ "$RC" -eq 0 ] && ok seconds_option_exits || ko seconds_option_exits "status $RC"
    fi
fi

# 6. Bad usage exits 2; a second delayer on a busy queue exits 1.
ip netns exec "$NB" "$DELAYER" --queue "$Q" 2>/dev/null
[ $? -eq 2 ] && ok usage_error_exits_2 || ko usage_error_exits_2 "wrong status"
if start_delayer --delay-ms 10 --seconds 30; then
    ip netns exec "$NB" "$DELAYER" --queue "$Q" --delay-ms 10 --seconds 2 >/dev/null 2>"$T/busy.err"
    [ $? -eq 1 ] && ok busy_queue_exits_1 || ko busy_queue_exits_1 "$(cat "$T/busy.err")"
    stop_delayer TERM
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
