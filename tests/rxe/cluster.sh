#!/bin/bash
# tests/rxe/cluster.sh: a 3-node ternd cluster with --transport rdma on
# soft-RoCE, run by tests/rxe/run.sh inside the rxe guest (or natively)
# after scripts/rxe-setup.sh built rxe0..rxe2 on veth n0..n2 <-> bridge
# ports p0..p2, node IPs 10.77.0.1-3, all in one netns. Node i (1..3)
# binds raft 10.77.0.i:750i (tcp and rdma_cm) and client 10.77.0.i:740i; the
# tern CLI runs in the guest too.
#
# Clients log in (client_auth = on) as the bootstrap admin.
# The nodes authenticate each other ([security] peer_auth = tls): the
# credentials (cluster CA, node certificates with the node IPs as SANs,
# cluster secret) are made by scripts/tern-certs.sh (BIN_DIR/tern-certs.sh
# as staged by run.sh, else the repository's) into $TERN_RXE_DIR/creds;
# the verbs handshake proves the cluster secret (rdma/verbs_cm.c), the tcp
# transport uses the TLS keys.
#
# Checks (one PASS/FAIL line each, then "N passed, N failed"):
#   stage A, produce/consume: leader elected, every node reports a verbs
#     transport, 2000 x 1 KiB produced with an ack log, each node's log
#     holds exactly the acknowledged ids at their offsets, and the rxe
#     packet counters show the replication went over RoCE, and no node
#     refused a peer's proof in the verbs handshake;
#   stage B, leader kill: kill -9 of the leader during a produce with
#     --ack-log; a new leader is elected; every acknowledged id is readable
#     from both survivors; the killed node restarts and catches up;
#   stage C, wire fault: netem loss 100% on one follower's veth (both ends)
#     while producing: the leader keeps committing; after healing the
#     follower's last_applied reaches the leader's commit index and its log
#     holds every acknowledged id. Observed and printed (INFO): the TCP
#     fallback (raft TCP connection to the follower, its progress during
#     the fault: TCP between local IPs goes over lo, so netem on the veth
#     breaks only RoCE) and the return to RDMA (the follower's rxe receive
#     counter grows again after healing; verbs trace lines of the leader);
#   stage D, deposed leader: SIGSTOP the leader during a produce; a new
#     leader is elected; after SIGCONT the old leader steps down; every
#     acknowledged id is on all three nodes and their logs are identical.
#     Printed (INFO): remote access errors (NIC fencing) / rejected connects
#     in the verbs traces. The verbs-level fencing test proper is
#     verbs_fencing/nic_rejects_deposed_sender in tests/hw (stage hw);
#   stage E, replication latency (a functional figure:
#     TCG timing is not a performance figure): `tern bench --replication`
#     window 1 with 1 KiB messages on the disk-mode cluster, then again
#     after a restart of all three nodes with durability = memory, and
#     once more over transport = tcp (the guest's TCG baseline), then over
#     rdma with the leader busy-polling its CQs (busy_poll_us = 300; the
#     leader's shutdown line must count polling rounds that found
#     completions); each run
#     must be acknowledged in full with leader-side samples from a node on
#     the expected transport; beside it, in the same run, the floor: ib_write_lat
#     (perftest) between the leader's and a follower's rxe device, its
#     typical one-way latency doubled as a round trip. Printed (INFO):
#     p50/p99 per durability, the floor and the ratio.
#
# Usage (in the guest): cluster.sh [BIN_DIR]   (default /mnt/work: ternd, tern)
# Env: TERN_RXE_ET_MS (1000) / TERN_RXE_HB_MS (100): raft election timeout
#      and heartbeat (TCG is slow: 150/15 elects spuriously under load);
#      TERN_RXE_COUNT (2000) messages per produce; TERN_RXE_FAULT_S (8)
#      seconds of netem loss; TERN_RXE_BENCH_COUNT (500) window-1
#      messages per stage-E bench; TERN_RXE_DIR (/tmp/tern-rxe) data and logs;
#      TERN_RXE_LOGS (BIN_DIR/cluster-logs) where node logs are copied at
#      the end. Every wait is bounded in time; every CLI call has a timeout.
# Exit: 0 when all checks passed, else 1.
set -u

BIN=${1:-/mnt/work}
D=${TERN_RXE_DIR:-/tmp/tern-rxe}
ET=${TERN_RXE_ET_MS:-1000}
HB=${TERN_RXE_HB_MS:-100}
COUNT=${TERN_RXE_COUNT:-2000}
BENCH_COUNT=${TERN_RXE_BENCH_COUNT:-500}
DURABILITY=disk # stage E restarts the cluster with memory,
TRANSPORT=rdma  # then with tcp,
BUSY_US=0       # then rdma with the leader busy-polling its CQs
FAULT_S=${TERN_RXE_FAULT_S:-8}
LOGS=${TERN_RXE_LOGS:-$BIN/cluster-logs}
TERND=$BIN/ternd
CREDS=$D/creds
CERTS=$BIN/tern-certs.sh
[ -x "$CERTS" ] || CERTS=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)/scripts/tern-certs.sh
TERN=$BIN/tern
TC=$(command -v tc || echo /usr/sbin/tc)
NODES=3
PASS=0
FAIL=0
declare -A PID

# ---- helpers -----------------------------------------------------------------
now_ms() { local t=${EPOCHREALTIME/./}; echo $((10#$t / 1000)); }
T0=$(now_ms)
ts() { local t=$(($(now_ms) - T0)); printf '%d.%03d' $((t / 1000)) $((t % 1000)); }
say() { echo "[$(ts)] $*"; }
pass() { PASS=$((PASS + 1)); echo "PASS: $1${2:+ ($2)}"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL: $1: $2"; }
check() { # name detail cond...
    local name=$1 detail=$2
    shift 2
    if "$@"; then pass "$name" "$detail"; else fail "$name" "$detail"; fi
}

ip_of() { echo "10.77.0.$1"; }
client_addr() { echo "$(ip_of "$1"):$((7400 + $1))"; }
raft_addr() { echo "$(ip_of "$1"):$((7500 + $1))"; }
SERVERS=$(client_addr 1),$(client_addr 2),$(client_addr 3)
veth() { echo "n$(($1 - 1))"; }   # node side of node i's veth pair
bport() { echo "p$(($1 - 1))"; }  # bridge side
rxe() { echo "rxe$(($1 - 1))"; }

# rxe packet counter (sent_pkts | rcvd_pkts) of node i's device.
rxe_ctr() { # i name
    local f v
    f=/sys/class/infiniband/$(rxe "$1")/ports/1/hw_counters/$2
    if [ -r "$f" ]; then cat "$f"; return; fi
    v=$(rdma stat show link "$(rxe "$1")/1" 2>/dev/null | grep -o "$2 [0-9]*" | awk '{print $2}')
    echo "${v:-0}"
}
# Raft TCP connections (any state but LISTEN) towards node i's raft port,
# from /proc/net/tcp ("st" 01 = ESTABLISHED, 02 = SYN_SENT).
raft_tcp_conns() { # i
    local hex
    hex=$(printf '%02X004D0A:%04X' "$1" $((7500 + $1)))
    awk -v r="$hex" '$3 == r && $4 != "0A" {print $4}' /proc/net/tcp | sort | uniq -c |
        awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), ($2 == "01" ? "ESTABLISHED" : "st" $2), $1}'
}

# `tern cluster status --json` of node i alone, one field.
status_json() { timeout 10 "$TERN" -s "$(client_addr "$1")" --timeout-ms 2000 cluster status --json 2>/dev/null; }
# The first occurrence of a key: the top-level field, which precedes the
# "members" array (whose entries carry a "role" of their own).
jnum() { grep -o "\"$1\":[0-9][0-9]*" | head -n 1 | sed 's/.*://'; }
jstr() { grep -o "\"$1\":\"[^\"]*\"" | head -n 1 | sed 's/^[^:]*:"//; s/"$//'; }
jbool() { grep -o "\"$1\":[a-z][a-z]*" | head -n 1 | sed 's/.*://'; }
node_field() { # i field kind(num|str|bool)
    local j
    j=$(status_json "$1") || return 0
    printf '%s' "$j" | "j$3" "$2"
}
alive() { [ -n "${PID[$1]:-}" ] && kill -0 "${PID[$1]}" 2>/dev/null; }

write_config() { # i
    local i=$1 p
    mkdir -p -m 700 "$D/node$i"
    {
        echo "[node]"
        echo "id = $i"
        echo "data_dir = $D/node$i"
        echo "client_addr = $(client_addr "$i")"
        echo "raft_addr = $(raft_addr "$i")"
        echo "transport = $TRANSPORT"
        echo "log_level = info"
        echo "busy_poll_us = $BUSY_US"
        echo "[raft]"
        echo "election_timeout_ms = $ET"
        echo "heartbeat_ms = $HB"
        echo "durability = $DURABILITY"
        echo "[limits]"
        echo "min_free_disk_bytes = 1M"
        echo "reserve_disk_bytes = 4M" # the guest fs is RAM
        echo "[security]"
        echo "peer_auth = tls"
        echo "cluster_ca = $CREDS/ca.pem"
        echo "node_cert = $CREDS/node$i.pem"
        echo "node_key = $CREDS/node$i.key"
        echo "cluster_secret_file = $CREDS/cluster.secret"
        echo "client_auth = on"
        echo "bootstrap_admin = admin"
        echo "bootstrap_admin_cred = $ADMIN_CRED"
        echo "[peers]"
        for p in $(seq 1 $NODES); do echo "$p = $(raft_addr "$p"),$(client_addr "$p")"; done
    } >"$D/node$i.ini"
}

start_node() { # i
    local i=$1
    write_config "$i"
    echo "---- start $(ts) ----" >>"$D/node$i.log"
    TERN_VERBS_TRACE=1 "$TERND" --config "$D/node$i.ini" </dev/null >>"$D/node$i.log" 2>&1 &
    PID[$i]=$!
    disown "${PID[$i]}" # no "Killed" job notices; bash still reaps it
    say "node $i started: pid ${PID[$i]}, raft $(raft_addr "$i"), client $(client_addr "$i")"
}

kill_node() { # i
    local i=$1 n
    alive "$i" || return 0
    kill -KILL "${PID[$i]}" 2>/dev/null
    for n in $(seq 1 50); do alive "$i" || break; sleep 0.1; done
    say "node $i (pid ${PID[$i]}) killed"
    PID[$i]=""
}

stop_all() {
    local i n
    for i in $(seq 1 $NODES); do alive "$i" && kill -TERM "${PID[$i]}" 2>/dev/null; done
    for n in $(seq 1 100); do
        local any=0
        for i in $(seq 1 $NODES); do alive "$i" && any=1; done
        [ $any = 0 ] && break
        sleep 0.1
    done
    for i in $(seq 1 $NODES); do alive "$i" && kill_node "$i"; done
}

# Number of the writable leader among the live nodes, or nothing.
leader_once() {
    local i j
    for i in $(seq 1 $NODES); do
        alive "$i" || continue
        j=$(status_json "$i") || continue
        if [ "$(printf '%s' "$j" | jstr role)" = leader ] &&
            [ "$(printf '%s' "$j" | jbool writable)" = true ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}
wait_leader() { # timeout_s -> prints the leader
    local end=$(($(now_ms) + $1 * 1000))
    while [ "$(now_ms)" -lt "$end" ]; do
        leader_once && return 0
        sleep 0.2
    done
    return 1
}

# Wait until node i has applied at least index want (bounded).
wait_applied() { # i want timeout_s
    local end=$(($(now_ms) + $3 * 1000)) a
    while [ "$(now_ms)" -lt "$end" ]; do
        a=$(node_field "$1" last_applied num)
        [ -n "$a" ] && [ "$a" -ge "$2" ] && return 0
        sleep 0.2
    done
    return 1
}

# Wait until file f has at least n lines, while pid p lives (bounded).
wait_lines() { # file n timeout_s pid
    local end=$(($(now_ms) + $3 * 1000))
    while [ "$(now_ms)" -lt "$end" ]; do
        [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
        kill -0 "$4" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# Wait for a background pid (bounded); kill it after the timeout. Sets RC.
wait_pid() { # pid timeout_s
    local end=$(($(now_ms) + $2 * 1000))
    while kill -0 "$1" 2>/dev/null && [ "$(now_ms)" -lt "$end" ]; do sleep 0.2; done
    if kill -0 "$1" 2>/dev/null; then
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
        RC=124
        return 1
    fi
    wait "$1"
    RC=$?
    return 0
}

# Consume queue q from node i alone into file out. Returns the CLI's status.
consume_from() { # i q out
    timeout 120 "$TERN" -s "$(client_addr "$1")" --timeout-ms 10000 consume "$2" --offset 0 >"$3" 2>"$3.err"
}

# Acked ids of ack log $1 missing from consume output $2 (an ack line with
# an offset must appear at that offset; offset -1 = id anywhere). A consume
# line is the offset, a tab and the payload: its id, then '.' padding.
missing_acks() { # ack consume
    awk -F'\t' 'NR == FNR { sub(/\..*/, "", $2); at[$1 "\t" $2] = 1; id[$2] = 1; next }
        ($2 == "-1" && !($1 in id)) || ($2 != "-1" && !(($2 "\t" $1) in at)) { m++ }
        END { print m + 0 }' "$2" "$1"
}
dup_ids() { awk -F'\t' '{ sub(/\..*/, "", $2); n[$2]++ } END { for (k in n) if (n[k] > 1) d++; print d + 0 }' "$1"; }

# Check that every node in "$nodes" holds every acked id of ack file in
# queue q, waiting first until it applied the leader's commit index.
check_acks_on() { # tag q ack leader nodes...
    local tag=$1 q=$2 ack=$3 l=$4 i ci miss dups lines
    shift 4
    ci=$(node_field "$l" commit_index num)
    for i in "$@"; do
        if ! wait_applied "$i" "${ci:-0}" 60; then
            fail "$tag: node $i applies up to the leader's commit index $ci" \
                "last_applied $(node_field "$i" last_applied num) after 60 s"
            continue
        fi
        if ! consume_from "$i" "$q" "$D/$q.c$i"; then
            fail "$tag: consume $q from node $i" "$(head -c 300 "$D/$q.c$i.err")"
            continue
        fi
        miss=$(missing_acks "$ack" "$D/$q.c$i")
        dups=$(dup_ids "$D/$q.c$i")
        lines=$(wc -l <"$D/$q.c$i")
        check "$tag: every acked id readable from node $i" \
            "$(wc -l <"$ack") acked, $lines in the log, $miss missing, $dups duplicate ids" \
            [ "$miss" = 0 ]
    done
}

show_cluster() {
    local i
    for i in $(seq 1 $NODES); do
        if alive "$i"; then
            say "  node $i: $(status_json "$i" | sed 's/,"members".*//')"
        else
            say "  node $i: down"
        fi
    done
}

finish() {
    local i
    stop_all
    mkdir -p "$LOGS" 2>/dev/null &&
        for i in $(seq 1 $NODES); do cp "$D/node$i.log" "$LOGS/" 2>/dev/null; done
    for i in $(seq 1 $NODES); do
        echo "---- node $i log: last lines (all in $LOGS/node$i.log on the host) ----"
        grep -v '^$' "$D/node$i.log" | tail -n 8
    done
    echo "cluster: total $(ts) s"
    echo "$PASS passed, $FAIL failed"
    [ "$FAIL" = 0 ]
    exit
}

# ---- setup ----------------------------------------------------------------------
[ -x "$TERND" ] && [ -x "$TERN" ] || {
    echo "FAIL: setup: $TERND or $TERN missing"
    echo "0 passed, 1 failed"
    exit 1
}
rm -rf "$D"
mkdir -p "$D"
SANS=()
for i in $(seq 1 $NODES); do SANS+=(--san "$(ip_of "$i")"); done
if ! out=$(bash "$CERTS" "${SANS[@]}" "$CREDS" $(seq 1 $NODES) 2>&1); then
    echo "FAIL: setup: credentials ($CERTS): $out"
    echo "0 passed, 1 failed"
    exit 1
fi
say "credentials: $out"
# The client ports listen on the guest's non-loopback addresses, so they
# speak TLS (client_tls = auto): every CLI call verifies them with the CA.
export TERN_TLS=1 TERN_CA=$CREDS/ca.pem
# Clients authenticate (client_auth = on): the leader creates the admin
# from bootstrap_admin_cred, and every CLI call logs in as it
# (SCRAM-SHA-256, TERN_USER/TERN_PASSWORD).
ADMIN_PW=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
ADMIN_CRED=$(printf '%s' "$ADMIN_PW" | "$TERN" user hash --password-stdin) || {
    echo "FAIL: setup: tern user hash"
    echo "0 passed, 1 failed"
    exit 1
}
export TERN_USER=admin TERN_PASSWORD=$ADMIN_PW
# A clean wire (an earlier stage may have left a netem qdisc behind).
for i in $(seq 1 $NODES); do
    $TC qdisc del dev "$(veth "$i")" root 2>/dev/null
    $TC qdisc del dev "$(bport "$i")" root 2>/dev/null
done
say "cluster: ET ${ET} ms, HB ${HB} ms, $COUNT x 1 KiB per produce, fault ${FAULT_S} s"

# ---- stage A: cluster up, transport, produce/consume ---------------------------------
for i in $(seq 1 $NODES); do start_node "$i"; done
t=$(now_ms)
if ! L=$(wait_leader 90); then
    fail "A: writable leader elected" "none after 90 s"
    show_cluster
    finish
fi
pass "A: writable leader elected" "node $L after $(($(now_ms) - t)) ms"
show_cluster

tr_ok=1 tr_list=""
for i in $(seq 1 $NODES); do
    x=$(node_field "$i" transport str)
    tr_list="$tr_list node$i=${x:-?}"
    case $x in *verbs*) ;; *) tr_ok=0 ;; esac
done
check "A: every node reports a verbs transport" "${tr_list# }" [ $tr_ok = 1 ]

timeout 30 "$TERN" -s "$SERVERS" --timeout-ms 10000 queue create qa >"$D/qa.create" 2>&1
rc=$?
check "A: queue create qa" "rc $rc $(head -c 200 "$D/qa.create")" [ $rc = 0 ]

declare -A S0
for i in $(seq 1 $NODES); do S0[$i]=$(($(rxe_ctr "$i" sent_pkts) + $(rxe_ctr "$i" rcvd_pkts))); done
t=$(now_ms)
timeout 300 "$TERN" -s "$SERVERS" --timeout-ms 20000 produce qa --count "$COUNT" --size 1024 \
    --ack-log "$D/qa.ack" --id-prefix a >"$D/qa.produce" 2>&1
rc=$?
dt=$(($(now_ms) - t))
acked=$(wc -l <"$D/qa.ack" 2>/dev/null || echo 0)
ok=0
[ $rc = 0 ] && [ "$acked" = "$COUNT" ] && ok=1
check "A: produce $COUNT x 1 KiB" "rc $rc, $acked acked in $dt ms; $(tail -c 200 "$D/qa.produce" | tr '\n' ' ')" \
    [ $ok = 1 ]
L=$(wait_leader 30) || L=1
check_acks_on A qa "$D/qa.ack" "$L" 1 2 3
same=1
for i in 2 3; do cmp -s "$D/qa.c1" "$D/qa.c$i" || same=0; done
check "A: the three logs of qa are identical" "$(wc -l <"$D/qa.c1") lines each" [ $same = 1 ]
rdma_ok=1 rlist=""
for i in $(seq 1 $NODES); do
    d=$(($(rxe_ctr "$i" sent_pkts) + $(rxe_ctr "$i" rcvd_pkts) - S0[$i]))
    rlist="$rlist $(rxe "$i")=+$d"
    # 2000 KiB to each follower in 4 KiB RoCE packets: >= 500 packets each.
    [ "$d" -ge $((COUNT / 4)) ] || rdma_ok=0
done
check "A: replication went over RoCE (rxe sent+rcvd packets during produce)" "${rlist# }" [ $rdma_ok = 1 ]
for i in $(seq 1 $NODES); do
    say "INFO: raft TCP connections towards node $i: $(raft_tcp_conns "$i")"
done

# Every verbs handshake between the nodes proved the secret: no node
# refused a peer's proof or message. Handshakes that only ran out of time
# (a loaded TCG guest at start-up: "timed out", "gone before
# authentication", a CM error event) are counted too but are liveness, not
# authentication: shown as INFO.
refusals=$(cat "$D"/node*.log 2>/dev/null | grep -E 'verbs\[[0-9]+\] (in|out)bound conn peer [0-9]+ refused: ')
slow='refused: (authentication timed out|gone before authentication|RDMA_CM_EVENT_)'
refused=$(printf '%s\n' "$refusals" | grep -v '^$' | grep -cvE "$slow")
say "INFO: handshakes that ran out of time: $(printf '%s\n' "$refusals" | grep -cE "$slow")"
check "A: verbs peers authenticated" "$refused refused proofs" [ "$refused" = 0 ]

# ---- stage B: leader kill during produce ------------------------------------------
timeout 30 "$TERN" -s "$SERVERS" --timeout-ms 10000 queue create qb >"$D/qb.create" 2>&1 ||
    fail "B: queue create qb" "$(head -c 200 "$D/qb.create")"
L=$(wait_leader 30) || L=""
if [ -z "$L" ]; then
    fail "B: leader before the kill" "none after 30 s"
    finish
fi
timeout 600 "$TERN" -s "$SERVERS" --timeout-ms 30000 produce qb --count "$COUNT" --size 1024 \
    --ack-log "$D/qb.ack" --id-prefix b >"$D/qb.produce" 2>&1 &
PP=$!
if ! wait_lines "$D/qb.ack" $((COUNT / 5)) 120 $PP; then
    fail "B: produce running before the kill" "$(wc -l <"$D/qb.ack" 2>/dev/null) acked; $(tail -c 200 "$D/qb.produce")"
fi
before=$(wc -l <"$D/qb.ack")
tk=$(now_ms)
kill_node "$L"
say "killed leader node $L with $before acked"
if NL=$(wait_leader 60); then
    pass "B: new leader among the survivors" "node $NL, $(($(now_ms) - tk)) ms after the kill"
else
    fail "B: new leader among the survivors" "none after 60 s"
fi
wait_pid $PP 300
prc=$RC
acked=$(wc -l <"$D/qb.ack")
say "INFO: produce across the kill: rc $prc, $acked acked ($before before the kill), $(($(now_ms) - tk)) ms after the kill; $(tail -c 300 "$D/qb.produce" | tr '\n' ' ')"
check "B: produce completed across the leader kill" "rc $prc, $acked of $COUNT acked" [ "$prc" = 0 ]
SURV=""
for i in $(seq 1 $NODES); do [ "$i" != "$L" ] && SURV="$SURV $i"; done
[ -n "${NL:-}" ] && check_acks_on B qb "$D/qb.ack" "$NL" $SURV
K=$L
start_node "$K"
NL=$(wait_leader 60) || NL=""
if [ -n "$NL" ]; then
    check_acks_on "B: restarted node $K" qb "$D/qb.ack" "$NL" "$K"
fi
show_cluster

# ---- stage C: netem loss on one follower's veth ---------------------------------
L=$(wait_leader 60) || L=""
if [ -z "$L" ]; then
    fail "C: leader before the fault" "none after 60 s"
    finish
fi
F=""
for i in $(seq 1 $NODES); do [ "$i" != "$L" ] && [ -z "$F" ] && F=$i; done
O=$((6 - L - F))
# The follower must be on RDMA again before the fault (it may be the
# restarted node): give it a moment of traffic and check its counter.
timeout 30 "$TERN" -s "$SERVERS" --timeout-ms 10000 queue create qc >"$D/qc.create" 2>&1 ||
    fail "C: queue create qc" "$(head -c 200 "$D/qc.create")"
say "C: leader $L, faulty follower $F ($(veth "$F")/$(bport "$F"), $(rxe "$F")), other $O"
r0=$(rxe_ctr "$F" rcvd_pkts)
timeout 600 "$TERN" -s "$SERVERS" --timeout-ms 30000 produce qc --count "$COUNT" --size 1024 \
    --ack-log "$D/qc.ack" --id-prefix c >"$D/qc.produce" 2>&1 &
PP=$!
wait_lines "$D/qc.ack" $((COUNT / 10)) 120 $PP ||
    fail "C: produce running before the fault" "$(wc -l <"$D/qc.ack" 2>/dev/null) acked"
r1=$(rxe_ctr "$F" rcvd_pkts)
say "INFO: before the fault: $(rxe "$F") rcvd +$((r1 - r0)); raft TCP towards node $F: $(raft_tcp_conns "$F")"
l0=$(wc -l <"$D/node$L.log")
ok=0
$TC qdisc add dev "$(bport "$F")" root netem loss 100% &&
    $TC qdisc add dev "$(veth "$F")" root netem loss 100% && ok=1
tf=$(now_ms)
r1=$(rxe_ctr "$F" rcvd_pkts)
check "C: netem loss 100% on $(bport "$F") and $(veth "$F")" "$($TC qdisc show dev "$(veth "$F")" | head -1)" [ $ok = 1 ]
c0=$(node_field "$L" commit_index num)
a0=$(node_field "$F" last_applied num)
# Sample until FAULT_S seconds have passed (each sample costs CLI calls).
for _ in $(seq 1 60); do
    [ "$(now_ms)" -ge $((tf + FAULT_S * 1000)) ] && break
    sleep 1
    say "  fault: leader commit $(node_field "$L" commit_index num), node $F applied $(node_field "$F" last_applied num), $(rxe "$F") rcvd $(rxe_ctr "$F" rcvd_pkts)"
done
c1=$(node_field "$L" commit_index num)
a1=$(node_field "$F" last_applied num)
r2=$(rxe_ctr "$F" rcvd_pkts)
ok=0
[ -n "$c1" ] && [ -n "$c0" ] && [ "$c1" -gt "$c0" ] && ok=1
check "C: the leader keeps committing during the fault" "commit index $c0 -> $c1" [ $ok = 1 ]
# TCP between two local IPs is routed over lo, so the netem fault breaks
# only RoCE: the follower keeps replicating through the TCP fallback while
# its rxe device receives (almost) nothing.
ok=0
[ -n "$a1" ] && [ -n "$a0" ] && [ "$a1" -gt "$a0" ] && [ $((r2 - r1)) -lt 50 ] && ok=1
check "C: node $F keeps replicating over the TCP fallback during the fault" \
    "last_applied $a0 -> $a1 while $(rxe "$F") received +$((r2 - r1)) packets" [ $ok = 1 ]
$TC qdisc del dev "$(bport "$F")" root
$TC qdisc del dev "$(veth "$F")" root
th=$(now_ms)
say "healed after $((th - tf)) ms"
say "INFO: raft TCP connections towards node $F: $(raft_tcp_conns "$F") (they exist from the start: first sends before the peers listened went over tcp)"
wait_pid $PP 300
prc=$RC
check "C: produce completed across the fault" "rc $prc, $(wc -l <"$D/qc.ack") acked; $(tail -c 200 "$D/qc.produce" | tr '\n' ' ')" [ "$prc" = 0 ]
ci=$(node_field "$L" commit_index num)
if wait_applied "$F" "${ci:-0}" 90; then
    pass "C: node $F catches up after healing" "last_applied >= leader commit $ci, $(($(now_ms) - th)) ms after healing"
else
    fail "C: node $F catches up after healing" "last_applied $(node_field "$F" last_applied num) < $ci after 90 s"
fi
# Return to RDMA: more traffic after healing must reach the follower's rxe.
r3=$(rxe_ctr "$F" rcvd_pkts)
timeout 300 "$TERN" -s "$SERVERS" --timeout-ms 30000 produce qc --count $((COUNT / 2)) --size 1024 \
    --ack-log "$D/qc.ack" --id-prefix d >"$D/qc.produce2" 2>&1
prc=$?
r4=$(rxe_ctr "$F" rcvd_pkts)
check "C: produce after healing" "rc $prc" [ $prc = 0 ]
check "C: replication to node $F is back on RoCE after healing ($(rxe "$F") rcvd packets)" \
    "+$((r4 - r3)) for $((COUNT / 2)) x 1 KiB (during the fault +$((r2 - r1)))" [ $((r4 - r3)) -ge $((COUNT / 8)) ]
say "INFO: raft TCP towards node $F after healing: $(raft_tcp_conns "$F")"
tail -n +"$((l0 + 1))" "$D/node$L.log" | grep '^verbs' >"$D/fault.trace"
say "INFO: leader (node $L) verbs trace since the fault (TERN_VERBS_TRACE): $(grep -c 'retry counter exceeded' "$D/fault.trace") retry-exceeded completions, $(grep -c "close outbound conn $(raft_addr "$F")" "$D/fault.trace") closes and $(grep -c 'connect timeout' "$D/fault.trace") connect timeouts towards $(raft_addr "$F"), $(grep -c "ESTABLISHED on $(raft_addr "$F")" "$D/fault.trace") re-established; first and last lines:"
{ head -n 3 "$D/fault.trace"; echo "    ..."; tail -n 3 "$D/fault.trace"; } | sed 's/^/    /'
L=$(wait_leader 30) || L=$L
check_acks_on C qc "$D/qc.ack" "$L" 1 2 3
show_cluster

# ---- stage D: fencing a deposed leader (SIGSTOP, new election, SIGCONT) ----
# The stopped leader's QPs stay up (rxe runs in the kernel); the followers
# elect a new leader and fence the old term; once continued, the old leader
# must step down, and no acknowledged write may be lost.
L=$(wait_leader 60) || L=""
if [ -z "$L" ]; then
    fail "D: leader before the stop" "none after 60 s"
    finish
fi
timeout 30 "$TERN" -s "$SERVERS" --timeout-ms 10000 queue create qd >"$D/qd.create" 2>&1 ||
    fail "D: queue create qd" "$(head -c 200 "$D/qd.create")"
declare -A LN
for i in $(seq 1 $NODES); do LN[$i]=$(wc -l <"$D/node$i.log"); done
term0=$(node_field "$L" term num)
timeout 600 "$TERN" -s "$SERVERS" --timeout-ms 30000 produce qd --count "$COUNT" --size 1024 \
    --ack-log "$D/qd.ack" --id-prefix f >"$D/qd.produce" 2>&1 &
PP=$!
wait_lines "$D/qd.ack" $((COUNT / 10)) 120 $PP ||
    fail "D: produce running before the stop" "$(wc -l <"$D/qd.ack" 2>/dev/null) acked"
kill -STOP "${PID[$L]}"
ts0=$(now_ms)
say "D: leader node $L (term $term0) stopped with $(wc -l <"$D/qd.ack") acked"
NL=""
end=$(($(now_ms) + 60000))
while [ "$(now_ms)" -lt "$end" ]; do
    for i in $(seq 1 $NODES); do
        [ "$i" = "$L" ] && continue
        j=$(status_json "$i") || continue
        if [ "$(printf '%s' "$j" | jstr role)" = leader ] &&
            [ "$(printf '%s' "$j" | jbool writable)" = true ]; then NL=$i; fi
    done
    [ -n "$NL" ] && break
    sleep 0.2
done
term1=$( [ -n "$NL" ] && node_field "$NL" term num)
check "D: new leader while the old one is stopped" \
    "node ${NL:-none}, term $term0 -> ${term1:-?}, $(($(now_ms) - ts0)) ms after SIGSTOP" [ -n "$NL" ]
sleep 2 # the new leader replicates in the new term meanwhile
kill -CONT "${PID[$L]}"
tc0=$(now_ms)
role="" end=$(($(now_ms) + 30000))
while [ "$(now_ms)" -lt "$end" ]; do
    j=$(status_json "$L")
    role=$(printf '%s' "$j" | jstr role)
    t=$(printf '%s' "$j" | jnum term)
    [ "$role" = follower ] && [ -n "$t" ] && [ "$t" -ge "${term1:-0}" ] && break
    sleep 0.2
done
OL=$L
check "D: the deposed leader (node $L) steps down after SIGCONT" \
    "role ${role:-?} term ${t:-?}, $(($(now_ms) - tc0)) ms after SIGCONT" [ "$role" = follower ]
wait_pid $PP 300
prc=$RC
check "D: produce completed across the deposition" "rc $prc, $(wc -l <"$D/qd.ack") acked; $(tail -c 200 "$D/qd.produce" | tr '\n' ' ')" [ "$prc" = 0 ]
L=$(wait_leader 30) || L=${NL:-1}
check_acks_on D qd "$D/qd.ack" "$L" 1 2 3
same=1
for i in 2 3; do cmp -s "$D/qd.c1" "$D/qd.c$i" || same=0; done
check "D: the three logs of qd are identical" "$(wc -l <"$D/qd.c1") lines each" [ $same = 1 ]
# NIC fencing: the followers revoked remote write on the old leader's
# QPs, so its first writes after SIGCONT complete with a remote error
# (rxe reports "remote invalid request error"; a real NIC may say "remote
# access error"); rdma/verbs.c counts these as nic_rejects.
NICREJ='remote access error\|remote invalid request error\|remote operation error'
info=""
for i in $(seq 1 $NODES); do
    tail -n +"$((LN[$i] + 1))" "$D/node$i.log" | grep '^verbs' >"$D/fence$i.trace"
    info="$info; node $i: $(grep -c "$NICREJ" "$D/fence$i.trace") NIC-rejected writes, $(grep -c 'reject connect request' "$D/fence$i.trace") rejected connects"
done
say "INFO: fencing in the verbs traces (old leader $OL)${info}"
grep -h "$NICREJ\|reject connect" "$D"/fence*.trace | head -n 6 | sed 's/^/    /'
n=$(grep -c "$NICREJ" "$D/fence$OL.trace")
check "D: the followers' NICs reject the deposed leader's RDMA writes" \
    "$n remote-error completions in node $OL's verbs trace after SIGCONT" [ "$n" -ge 1 ]
show_cluster

# ---- stage E: replication latency on rxe, beside ib_write_lat -----------------
# One window-1 bench per durability (functional: TCG timing), then the
# perftest floor between the leader's and a follower's device.
jfloat() { sed -n "s/.*\"$1\":\([0-9.][0-9.]*\).*/\1/p"; }
bench_e() { # durability transport-glob -> sets E_P50 E_P99 (us) on success
    local dur=$1 want=$2 j r rc n tr
    E_P50="" E_P99=""
    L=$(wait_leader 60) || L=""
    if [ -z "$L" ]; then
        fail "E: leader for the $dur bench" "none after 60 s"
        return
    fi
    timeout 300 "$TERN" -s "$SERVERS" --timeout-ms 30000 bench "qe-$dur-$TRANSPORT" \
        --size 1024 --count "$BENCH_COUNT" --window 1 --replication --json \
        >"$D/qe-$dur.json" 2>"$D/qe-$dur.err"
    rc=$?
    j=$(tail -n 1 "$D/qe-$dur.json" 2>/dev/null)
    r=$(printf '%s' "$j" | sed -n 's/.*"replication_us":{\([^}]*\)}.*/\1/p')
    n=$(printf '%s' "$r" | jnum count)
    tr=$(printf '%s' "$r" | jstr transport)
    E_P50=$(printf '%s' "$r" | jfloat p50)
    E_P99=$(printf '%s' "$r" | jfloat p99)
    ok=0
    # shellcheck disable=SC2254 # $want is a glob on purpose
    [ "$rc" = 0 ] && [ "$(printf '%s' "$j" | jnum acked)" = "$BENCH_COUNT" ] &&
        [ "$(printf '%s' "$j" | jnum errors)" = 0 ] && [ "${n:-0}" -gt 0 ] &&
        case "$tr" in $want) true ;; *) false ;; esac && [ -n "$E_P50" ] && ok=1
    check "E: $dur bench, $BENCH_COUNT x 1 KiB window 1, transport $TRANSPORT ($want)" \
        "rc $rc, acked $(printf '%s' "$j" | jnum acked), errors $(printf '%s' "$j" | jnum errors), ${n:-0} samples on node $(printf '%s' "$r" | jnum node_id) (${tr:-?}, $(printf '%s' "$r" | jstr durability)), p50 ${E_P50:-?} us p99 ${E_P99:-?} us" \
        [ $ok = 1 ]
}
bench_e disk 'verbs*'
DP50=$E_P50 DP99=$E_P99
stop_all
DURABILITY=memory
for i in $(seq 1 $NODES); do start_node "$i"; done
bench_e memory 'verbs*'
MP50=$E_P50 MP99=$E_P99
# The same guest's TCG baseline: memory mode over tcp.
stop_all
TRANSPORT=tcp
for i in $(seq 1 $NODES); do start_node "$i"; done
bench_e memory tcp
TP50=$E_P50 TP99=$E_P99
# rdma again with the leader polling its CQs (busy_poll_us; followers
# sleep: three spinning nodes would starve the 2-vCPU guest). The
# leader's shutdown line counts its polling rounds that found completions.
stop_all
TRANSPORT=rdma BUSY_US=300
for i in $(seq 1 $NODES); do start_node "$i"; done
bench_e memory 'verbs*'
BP50=$E_P50 BP99=$E_P99
BL=$(wait_leader 10) || BL=$L
stop_all
hits=$(grep -h "replication stages" "$D/node$BL.log" | tail -n 1 | sed -n 's/.* spin_hits=\([0-9]*\).*/\1/p')
check "E: the polling leader (node $BL) found completions by polling its CQs" \
    "spin_hits=${hits:-?} in its shutdown line" [ "${hits:-0}" -gt 0 ]
# The floor between the last leader's device and a follower's, with the
# nodes stopped (perftest's clock calibration gives "inf" when the guest is
# busy: up to 3 tries, finite figures only).
L=$BL
F=$((L % NODES + 1))
FLOOR="" irc=""
for try in 1 2 3; do
    port=$((18514 + try))
    timeout 60 ib_write_lat -d "$(rxe "$F")" -x 1 -s 1024 -n 1000 -p $port >"$D/ibw.server" 2>&1 &
    SRV=$!
    sleep 1 # perftest's server has no ready signal
    timeout 60 ib_write_lat -d "$(rxe "$L")" -x 1 -s 1024 -n 1000 -p $port "$(ip_of "$F")" \
        >"$D/ibw.client" 2>&1
    irc=$?
    wait_pid $SRV 30
    # Data row: bytes iterations t_min t_max t_typical ...; one-way usec.
    FLOOR=$(awk '$1 == 1024 && NF >= 5 && $5 ~ /^[0-9.]+$/ && $5 > 0 { printf "%.2f", 2 * $5 }' \
        "$D/ibw.client" | tail -n 1)
    [ "$irc" = 0 ] && [ -n "$FLOOR" ] && break
    say "E: ib_write_lat try $try: rc $irc, no finite figure; $(grep -v '^ *$' "$D/ibw.client" | tail -n 2 | tr -s ' ' | tr '\n' ' ' | head -c 200)"
done
ok=0
[ "$irc" = 0 ] && [ -n "$FLOOR" ] && ok=1
check "E: ib_write_lat floor, $(rxe "$L") -> $(rxe "$F"), 1 KiB" \
    "rc $irc, round trip ${FLOOR:-?} us (2 x t_typical, try $try)" [ $ok = 1 ]
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.1fx", a / b; else print "-" }'; }
say "INFO: rdma replication (leader append->commit, window 1, 1 KiB) on rxe under TCG: disk p50 ${DP50:-?} us p99 ${DP99:-?} us ($(ratio "$DP50" "$FLOOR")), memory p50 ${MP50:-?} us p99 ${MP99:-?} us ($(ratio "$MP50" "$FLOOR")); floor ib_write_lat round trip ${FLOOR:-?} us; the same guest over tcp (memory) p50 ${TP50:-?} us p99 ${TP99:-?} us; rdma memory with the leader polling p50 ${BP50:-?} us p99 ${BP99:-?} us (same run; functional figures, not performance)"
finish
