#!/bin/bash
# tests/rxe/run.sh: run tern's RDMA tests on real soft-RoCE, in ONE guest
# boot: stage "hw" = the verbs transport conformance suite (tests/hw, ctest
# label rdma-hw); stage "cluster" = tests/rxe/cluster.sh, a 3-node ternd
# cluster with --transport rdma (produce/consume, leader kill, netem wire
# fault with TCP fallback and return to RDMA, deposed-leader fencing,
# replication latency beside ib_write_lat; see that file). This host's
# kernel has no RDMA, so the tests run in a QEMU TCG guest with Debian's
# kernel and three rxe devices (rxe0..rxe2 on veth + bridge, node IPs
# 10.77.0.1-3 inside the guest), using
# the reference tooling in ../shared/tools/rxe-vm (read-only is fine: it
# writes only to its cache, $RXEVM_CACHE, default /tmp/rxe-vm).
#
# Steps: (1) install the host packages the guest image needs (qemu, busybox,
# rdma-core tools, ...; apt-get, needs root; skipped when present);
# (2) build test_hw_verbs, ternd and tern on the host (cmake, build dir below; the guest
# runs host binaries through 9p, so host glibc = guest glibc, and the
# Criterion/libuv closure is copied next to it); (3) boot the guest (the
# kernel .deb is fetched and the initramfs built on first use, ~1 min) and
# run the stages: hw with sender on 10.77.0.1 (rxe0), receiver on 10.77.0.2
# (rxe1); cluster with node i on 10.77.0.i (rxe(i-1)).
#
# Usage: tests/rxe/run.sh [-b BUILD_DIR] [-t VM_TIMEOUT_S] [-F CRITERION_FILTER]
#                         [-a 'MORE CRITERION ARGS'] [-r REPEAT] [-S STAGES]
#                         [-T script|builtin] [-N] [-k] [-n]
#   -b  build dir (default: <repo>/build-rxe)       -n  do not (re)build
#   -t  overall VM timeout in seconds (default 1500)  -k  keep the VM run dir
#   -F  Criterion --filter, e.g. 'conformance_verbs/bidirectional'
#   -r  run the test binary REPEAT times in the same guest (flakiness hunt)
#   -S  stages, comma separated: hw,cluster (default both)
#   -T  who builds the rxe topology in the guest: "script" (default: the
#       guest boots without rxe devices and runs scripts/rxe-setup.sh, the
#       same script a native host uses) or "builtin" (rxe-vm's init.sh)
#   -N  native: no guest; run the stages on this host after
#       scripts/rxe-setup.sh up (needs root and rdma_rxe in this kernel;
#       exit 77 when it has none), then rxe-setup.sh down
# Env: TERN_RXEVM_DIR (default <repo>/../shared/tools/rxe-vm), RXEVM_CACHE;
#      TERN_HW_*, TERN_RXE_* (cluster.sh knobs) and TERN_VERBS_TRACE are
#      passed into the guest (e.g. TERN_HW_DEADLINE_S=60; TERN_VERBS_TRACE=1
#      traces connection events; TERN_RXE_ET_MS=150 TERN_RXE_HB_MS=15).
#      Node logs of the cluster stage: BUILD_DIR/rxe-work/cluster-logs/.
# Output: the tests' output, then "N passed, N failed" (sum of the stages).
# Exit: 0 all passed; 1 failures (or the tests hung); 77 when the guest
# cannot be booted here (tooling absent, packages not installable, no
# qemu): a SKIP for ctest / make.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
RXEVM=${TERN_RXEVM_DIR:-$REPO/../shared/tools/rxe-vm}
BUILD=$REPO/build-rxe
TMO=1500
FILTER=""
ARGS=""
REPEAT=1
KEEP=""
NOBUILD=0
STAGES=hw,cluster
TOPO=script
NATIVE=0
while getopts "b:t:F:a:r:S:T:Nkn" o; do
    case $o in
    b) BUILD=$OPTARG ;;
    t) TMO=$OPTARG ;;
    F) FILTER=$OPTARG ;;
    a) ARGS=$OPTARG ;;
    r) REPEAT=$OPTARG ;;
    S) STAGES=$OPTARG ;;
    T) TOPO=$OPTARG ;;
    N) NATIVE=1 ;;
    k) KEEP=-k ;;
    n) NOBUILD=1 ;;
    *) sed -n '2,45s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done

skip() { echo "rxe: SKIP: $*"; exit 77; }
log() { echo "rxe: $*" >&2; }

case $TOPO in script | builtin) ;; *) echo "rxe: -T script|builtin" >&2; exit 2 ;; esac

# ---- 1. tooling and host packages ------------------------------------------
if [ $NATIVE = 1 ]; then
    "$REPO/scripts/rxe-setup.sh" check ||
        skip "native: no rdma_rxe here (or not root); use the guest (no -N)"
else
    [ -x "$RXEVM/run-in-vm.sh" ] && [ -x "$RXEVM/build-initramfs.sh" ] ||
        skip "rxe-vm tooling not found at $RXEVM (set TERN_RXEVM_DIR)"
fi
# Same list as rxe-vm/build-initramfs.sh, which exits silently (status 1)
# when one of them is missing, so they are installed here first.
PKGS="qemu-system-x86 busybox-static kmod cpio ibverbs-utils rdmacm-utils
      perftest ibverbs-providers libibverbs-dev librdmacm-dev iproute2 xz-utils"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || skip "missing host packages:$missing (run as root to install)"
    log "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 \
        $missing >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends \
              -o DPkg::Lock::Timeout=600 $missing >&2; } ||
        skip "could not install:$missing"
fi
[ $NATIVE = 1 ] || command -v qemu-system-x86_64 >/dev/null ||
    skip "qemu-system-x86_64 not found"

# ---- 2. build on the host ---------------------------------------------------
if [ $NOBUILD = 0 ]; then
    log "building test_hw_verbs ternd tern_cli in $BUILD"
    mkdir -p "$BUILD"
    cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_PROJECT_tern_INCLUDE="$REPO/tests/rxe/with-hw.cmake" \
        >"$BUILD/rxe-cmake.log" 2>&1 ||
        { cat "$BUILD/rxe-cmake.log" >&2; echo "rxe: configure failed"; exit 1; }
    cmake --build "$BUILD" --target test_hw_verbs ternd tern_cli -j2 >&2 ||
        { echo "rxe: build failed"; exit 1; }
fi
# The newest one (tests/hw/ once tests/CMakeLists.txt lists hw, else the
# build root through with-hw.cmake).
# Never the staged copy in $WORK (newer, and deleted just below).
WORK=$BUILD/rxe-work
BIN=$(find "$BUILD" -path "$WORK" -prune -o -name test_hw_verbs -type f -perm -u+x -printf '%T@ %p\n' |
    sort -n | tail -1 | cut -d' ' -f2-)
[ -n "$BIN" ] || { echo "rxe: test_hw_verbs not built in $BUILD (libibverbs-dev/librdmacm-dev missing?)"; exit 1; }

# Stage the binary and its shared libraries (minus glibc and rdma-core,
# which the guest has) in the 9p work dir.
rm -rf "$WORK"
mkdir -p "$WORK/lib"
cp "$BIN" "$WORK/" || { echo "rxe: staging $BIN failed"; exit 1; }
BINS="$BIN"
case ",$STAGES," in *,cluster,*)
    for b in "$BUILD/node/ternd" "$BUILD/client/tern"; do
        [ -x "$b" ] || { echo "rxe: $b not built"; exit 1; }
        cp "$b" "$WORK/"
        BINS="$BINS $b"
    done
    cp "$REPO/tests/rxe/cluster.sh" "$WORK/"
    ;;
esac
cp "$REPO/scripts/rxe-setup.sh" "$WORK/"
ldd $BINS | awk '/=> \//{print $3}' | sort -u | while read -r l; do
    case $(basename "$l") in
    libc.so.* | ld-linux* | libibverbs.so.* | librdmacm.so.* | libnl-*) ;;
    *) cp -L "$l" "$WORK/lib/" ;;
    esac
done
# The topology: scripts/rxe-setup.sh (TOPO=script, and always natively),
# else the one rxe-vm's init.sh built.
if [ $NATIVE = 1 ] || [ $TOPO = script ]; then
    SETUP="bash \$W/rxe-setup.sh up -n 3 -e \$W/rxe.env || { echo 'rxe-guest: rxe-setup.sh up failed'; echo '0 passed, 1 failed'; exit 1; }
set -a; . \$W/rxe.env; set +a
trap 'bash \$W/rxe-setup.sh down -e \$W/rxe.env >/dev/null' EXIT
echo 'rxe-guest: topology by scripts/rxe-setup.sh'"
else
    SETUP="echo 'rxe-guest: topology by rxe-vm init.sh'"
fi
cat >"$WORK/guest.sh" <<EOF
echo "rxe-guest: up"
W=\${TERN_RXE_WORK:-/mnt/work}
$SETUP
$(env | grep -E '^TERN_(HW_[A-Z_]+|RXE_[A-Z_]+|VERBS_TRACE)=' | sed "s/^/export /; s/=\(.*\)/='\1'/")
export LD_LIBRARY_PATH=\$W/lib
# Wire faults for tests/hw (node 2 = 10.77.0.2 = veth n1 <-> bridge port p1).
# /usr/bin/tc: system() runs busybox sh, whose own tc applet would win.
export TERN_HW_PARTITION="/usr/bin/tc qdisc add dev p1 root netem loss 100% && /usr/bin/tc qdisc add dev n1 root netem loss 100%"
export TERN_HW_HEAL="/usr/bin/tc qdisc del dev p1 root; /usr/bin/tc qdisc del dev n1 root"
ulimit -l unlimited
ibv_devices | sed -n '3,\$p' | awk '{print "rxe-guest: device " \$1}'
echo "rxe-guest: node IPs \$RXEVM_NODE_IPS"
cd \$W
rc=0 p=0 f=0
add_counts() { # log file
    local c
    c=\$(grep -E '^[0-9]+ passed, [0-9]+ failed\$' "\$1" | tail -1)
    [ -n "\$c" ] || { c="0 passed, 1 failed"; [ \$rc != 0 ] || rc=1; }
    p=\$((p + \$(echo "\$c" | awk '{print \$1}')))
    f=\$((f + \$(echo "\$c" | awk '{print \$3}')))
    echo "rxe-guest: stage \$2: \$c"
}
case ",$STAGES," in *,hw,*)
echo "rxe-guest: stage hw: verbs conformance suite (\$(date +%T))"
t0=\$(cut -d' ' -f1 /proc/uptime)
for i in \$(seq $REPEAT); do
    ./test_hw_verbs --jobs 1 ${FILTER:+--filter '$FILTER'} $ARGS > /tmp/hw.log 2>&1
    r=\$?
    cat /tmp/hw.log
    [ \$r = 0 ] || rc=\$r
    add_counts /tmp/hw.log hw
done
echo "rxe-guest: stage hw took \$(awk -v a=\$t0 -v b=\$(cut -d' ' -f1 /proc/uptime) 'BEGIN{printf "%.1f", b-a}') s"
;;
esac
case ",$STAGES," in *,cluster,*)
echo "rxe-guest: stage cluster: 3 ternd --transport rdma on rxe0..rxe2"
t0=\$(cut -d' ' -f1 /proc/uptime)
bash \$W/cluster.sh \$W 2>&1 | tee /tmp/cluster.log
r=\${PIPESTATUS[0]}
[ \$r = 0 ] || rc=\$r
add_counts /tmp/cluster.log cluster
echo "rxe-guest: stage cluster took \$(awk -v a=\$t0 -v b=\$(cut -d' ' -f1 /proc/uptime) 'BEGIN{printf "%.1f", b-a}') s"
;;
esac
rdma stat show 2>/dev/null | grep -o 'link [^ ]*\|sent_pkts [0-9]*\|rcvd_pkts [0-9]*' | paste -sd' ' | sed 's/^/rxe-guest: /'
echo "\$p passed, \$f failed"
exit \$rc
EOF

# ---- 3. boot the guest and run ---------------------------------------------
OUT=$BUILD/rxe-run.log
if [ $NATIVE = 1 ]; then
    log "native run on $(uname -r) (timeout ${TMO}s; log $OUT)"
    TERN_RXE_WORK=$WORK timeout -k 10 "$TMO" bash "$WORK/guest.sh" 2>&1 |
        tee "$OUT"
    rc=${PIPESTATUS[0]}
else
    NET=bridge
    [ $TOPO = script ] && NET=none
    log "booting the rxe guest (net $NET, timeout ${TMO}s; log $OUT)"
    "$RXEVM/run-in-vm.sh" $KEEP -n $NET -t "$TMO" -w "$WORK" \
        -f "$WORK/guest.sh" 2>&1 | tee "$OUT"
    rc=${PIPESTATUS[0]}
fi
if ! grep -q '^rxe-guest: up' "$OUT"; then
    skip "the rxe guest did not boot here (run-in-vm.sh rc=$rc)"
fi
counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT" | tail -1)
if [ -z "$counts" ]; then
    echo "rxe: the tests did not finish (rc=$rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "$counts"
if [ "${counts%% passed*}" = 0 ]; then
    echo "rxe: no test ran (filter matched nothing?)"
    exit 1
fi
[ "$rc" = 0 ] && [ "${counts#* passed, }" = "0 failed" ] && exit 0
exit 1
