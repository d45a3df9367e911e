#!/usr/bin/env bash
# scripts/rxe-setup.sh: soft-RoCE (rdma_rxe) test topology on THIS kernel,
# for hosts with rxe support (or inside the rxe guest, where tests/rxe/run.sh
# uses it): N "nodes" in one network namespace, veth nI <-> pI, every pI on
# bridge BR, node I = SUBNET.(I+1)/24 on nI with its own rxe device rxeI.
# It is the topology tests/rxe/cluster.sh and tests/hw expect (defaults:
# 3 nodes, 10.77.0.1-3, rxe0..rxe2, bridge br0, MTU 9000).
#
#   scripts/rxe-setup.sh up [-n NODES] [-m MTU] [-s SUBNET] [-e ENV_FILE]
#   scripts/rxe-setup.sh down [-e ENV_FILE]
#   scripts/rxe-setup.sh check            exit 0 if rxe can work here
#
# `up` loads rdma_rxe if needed, creates the links (refusing to touch names
# that already exist), pins static neighbours (no ARP races), waits (at most
# 5 s) until every port is ACTIVE with its IPv4 GID, and writes ENV_FILE
# (default /run/tern-rxe.env): RXE_NODES, RXE_NODE_IPS, RXE_DEVS,
# RXE_GID_INDEX, RXE_LINKS, and the same under the RXEVM_* names that
# tests/hw reads (RXEVM_NODE_IPS). `down`
# deletes exactly what that file lists. Needs root.
#
# Why one namespace: rxe's UDP socket lives in init_net on Linux 6.1, so
# RoCE packets arriving in a per-node namespace are dropped.
# Traffic crosses veth + bridge only when rdma_cm binds the source IP (ternd
# and tests/hw do). The sysctls below make each nI answer only for its own
# address and accept packets from "local" sources. The subnet has no
# gateway: nothing is routed off the machine.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "rxe-setup: $*" >&2; exit 1; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
NODES=3 MTU=9000 SUBNET=10.77.0 ENV_FILE=/run/tern-rxe.env BR=br0
while getopts "n:m:s:e:b:" o; do
    case $o in
    n) NODES=$OPTARG ;;
    m) MTU=$OPTARG ;;
    s) SUBNET=$OPTARG ;;
    e) ENV_FILE=$OPTARG ;;
    b) BR=$OPTARG ;;
    *) usage ;;
    esac
done
[[ $NODES =~ ^[1-9]$ ]] || die "nodes must be 1..9"

have_rxe() {
    [ -d /sys/module/rdma_rxe ] && return 0
    modprobe rdma_rxe 2>/dev/null && [ -d /sys/module/rdma_rxe ]
}

ports_ready() { # every rxe port ACTIVE with a non-zero GID at index 1
    local d gid
    for d in "$@"; do
        grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null ||
            return 1
        gid=$(cat "/sys/class/infiniband/$d/ports/1/gids/1" 2>/dev/null) ||
            return 1
        [ "$gid" != 0000:0000:0000:0000:0000:0000:0000:0000 ] || return 1
    done
}

do_down() {
    [ -f "$ENV_FILE" ] || { echo "rxe-setup: nothing to remove ($ENV_FILE absent)"; return 0; }
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    local d l
    for d in ${RXE_DEVS:-}; do
        rdma link delete "$d" 2>/dev/null || true
    done
    for l in ${RXE_LINKS:-}; do
        ip link delete "$l" 2>/dev/null || true
    done
    rm -f "$ENV_FILE"
    echo "rxe-setup: removed ${RXE_DEVS:-} ${RXE_LINKS:-}"
}

do_up() {
    [ "$(id -u)" = 0 ] || die "needs root"
    have_rxe || die "no rdma_rxe on this kernel ($(uname -r))"
    command -v rdma >/dev/null || die "the 'rdma' tool (iproute2) is missing"
    [ ! -f "$ENV_FILE" ] || die "$ENV_FILE exists: run 'down' first"
    local i j name
    for ((i = 0; i < NODES; i++)); do
        for name in "n$i" "p$i"; do
            [ ! -e "/sys/class/net/$name" ] || die "link $name already exists"
        done
        [ ! -e "/sys/class/infiniband/rxe$i" ] || die "rxe$i already exists"
    done
    [ ! -e "/sys/class/net/$BR" ] || die "bridge $BR already exists"

    # From here on, a failure removes what was made.
    local links="$BR" devs="" ips=""
    trap 'RXE_LINKS=$links RXE_DEVS=$devs; write_env; do_down >/dev/null' ERR
    for s in all default; do
        echo 1 >"/proc/sys/net/ipv4/conf/$s/accept_local"
        echo 0 >"/proc/sys/net/ipv4/conf/$s/rp_filter"
        echo 1 >"/proc/sys/net/ipv4/conf/$s/arp_ignore"
        echo 2 >"/proc/sys/net/ipv4/conf/$s/arp_announce"
    done
    ip link add "$BR" type bridge
    ip link set "$BR" up
    for ((i = 0; i < NODES; i++)); do
        ip link add "n$i" mtu "$MTU" type veth peer name "p$i" mtu "$MTU"
        links="$links n$i"
        ip link set "p$i" master "$BR"
        ip link set "p$i" up
        ip addr add "$SUBNET.$((i + 1))/24" dev "n$i"
        ip link set "n$i" up
        rdma link add "rxe$i" type rxe netdev "n$i"
        devs="$devs rxe$i"
        ips="$ips $SUBNET.$((i + 1))"
    done
    for ((i = 0; i < NODES; i++)); do
        for ((j = 0; j < NODES; j++)); do
            [ "$i" = "$j" ] && continue
            ip neigh replace "$SUBNET.$((j + 1))" \
                lladdr "$(cat "/sys/class/net/n$j/address")" dev "n$i" \
                nud permanent
        done
    done
    devs=${devs# } ips=${ips# }
    RXE_LINKS=$links RXE_DEVS=$devs RXE_NODE_IPS=$ips
    write_env
    trap - ERR
    for ((i = 0; i < 50; i++)); do
        # shellcheck disable=SC2086
        ports_ready $devs && break
        sleep 0.1
    done
    # shellcheck disable=SC2086
    ports_ready $devs || die "ports not ACTIVE with a GID after 5 s ($devs)"
    echo "rxe-setup: $NODES nodes up: $devs on $ips (env in $ENV_FILE)"
}

write_env() {
    mkdir -p "$(dirname "$ENV_FILE")"
    cat >"$ENV_FILE" <<EOF
RXE_NODES=$NODES
RXE_NODE_IPS="${RXE_NODE_IPS:-}"
RXE_DEVS="${RXE_DEVS:-}"
RXE_LINKS="${RXE_LINKS:-}"
RXE_GID_INDEX=1
RXEVM_NODES=$NODES
RXEVM_NODE_IPS="${RXE_NODE_IPS:-}"
RXEVM_DEVS="${RXE_DEVS:-}"
RXEVM_GID_INDEX=1
EOF
}

case $cmd in
up) do_up ;;
down) do_down ;;
check) [ "$(id -u)" = 0 ] && have_rxe && command -v rdma >/dev/null ;;
*) usage ;;
esac
