#!/bin/bash
# tests/rxe/run.sh: runs tern's RDMA tests on real soft-RoCE, in ONE guest
# boot: stage "hw" = the verbs transport conformance suite (tests/hw, ctest
# label rdma-hw); stage "cluster" = tests/rxe/cluster.sh, a 3-node ternd
# cluster with --transport rdma (produce/consume, leader kill, netem wire
# fault with TCP fallback and return to RDMA, deposed-leader fencing,
# replication latency beside ib_write_lat; the nodes authenticate each
# other with credentials from scripts/tern-certs.sh; see that file). A
# kernel without
# RDMA (like a CI runner's) runs them in a QEMU guest with Debian's kernel,
# built and booted by the scripts beside this one: guest-build.sh (kernel
# and initramfs from Debian packages, cached), guest-init.sh (the guest's
# /init), guest-run.sh (QEMU, 9p work share, exit status). The guest boots
# without rxe devices; scripts/rxe-setup.sh, the script a native rxe host
# uses, builds three (rxe0..rxe2 on veth + bridge, node IPs 10.77.0.1-3).
#
# Steps: (1) tests/rxe/guest-build.sh: installs the host packages the guest
# needs (QEMU, busybox, rdma-core tools, ...; apt-get, root; skipped when
# present), fetches the kernel and builds the initramfs (the first time
# about a minute, then a no-op); (2) builds test_hw_verbs, ternd and the tern
# CLI on the host (cmake, build dir below; the guest runs host binaries
# over 9p, so host glibc = guest glibc, and their library closure is staged
# beside them); (3) boots the guest and runs the stages: hw with sender on
# 10.77.0.1 (rxe0), receiver on 10.77.0.2 (rxe1); cluster with node i on
# 10.77.0.i (rxe(i-1)).
#
# Usage: tests/rxe/run.sh [-b BUILD_DIR] [-t VM_TIMEOUT_S] [-F CRITERION_FILTER]
#                         [-a 'MORE CRITERION ARGS'] [-r REPEAT] [-S STAGES]
#                         [-N] [-k] [-n]
#   -b  build dir (default: <repo>/build-rxe)       -n  do not (re)build
#   -t  overall VM timeout in seconds (default 1500)  -k  keep the VM run dir
#   -F  Criterion --filter, e.g. 'conformance_verbs/bidirectional'
#   -r  run the test binary REPEAT times in the same guest (flakiness hunt)
#   -S  stages, comma separated: hw,cluster (default both)
#   -N  native: no guest; run the stages on this host after
#       scripts/rxe-setup.sh up (needs root and rdma_rxe in this kernel;
#       exit 77 when it has none), then rxe-setup.sh down
# Env: TERN_RXE_CACHE (the guest cache, see guest-build.sh; default
#      ~/.cache/tern-rxe), TERN_RXE_ACCEL (see guest-run.sh);
#      TERN_HW_*, TERN_RXE_* (cluster.sh knobs) and TERN_VERBS_TRACE are
#      passed into the guest (e.g. TERN_HW_DEADLINE_S=60; TERN_VERBS_TRACE=1
#      traces connection events; TERN_RXE_ET_MS=150 TERN_RXE_HB_MS=15).
#      Node logs of the cluster stage: BUILD_DIR/rxe-work/cluster-logs/.
# Output: the tests' output, then "N passed, N failed" (sum of the stages).
# Exit: 0 all passed; 1 failures (or the tests hung, or the guest did not
# boot); 77 when the guest cannot be built here (host packages missing and
# not root, apt or the kernel download failed, no QEMU): a SKIP for ctest
# and scripts/test.sh.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=$REPO/build-rxe
TMO=1500
FILTER=""
ARGS=""
REPEAT=1
KEEP=""
NOBUILD=0
STAGES=hw,cluster
NATIVE=0
while getopts "b:t:F:a:r:S:Nkn" o; do
    case $o in
    b) BUILD=$OPTARG ;;
    t) TMO=$OPTARG ;;
    F) FILTER=$OPTARG ;;
    a) ARGS=$OPTARG ;;
    r) REPEAT=$OPTARG ;;
    S) STAGES=$OPTARG ;;
    N) NATIVE=1 ;;
    k) KEEP=-k ;;
    n) NOBUILD=1 ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    esac
done

skip() { echo "rxe: SKIP: $*"; exit 77; }
log() { echo "rxe: $*" >&2; }
fail() { echo "rxe: $*"; echo "0 passed, 1 failed"; exit 1; }

# ---- 1. the guest (or, natively, this kernel's rxe) ---------------------------
if [ $NATIVE = 1 ]; then
    "$REPO/scripts/rxe-setup.sh" check ||
        skip "native: no rdma_rxe here (or not root); use the guest (no -N)"
else
    log "preparing the guest (tests/rxe/guest-build.sh)"
    "$HERE/guest-build.sh" >/dev/null
    case $? in
    0) ;;
    77) skip "the rxe guest cannot be built here (see the guest-build lines above)" ;;
    *) fail "tests/rxe/guest-build.sh failed" ;;
    esac
    command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found"
fi

# ---- 2. build on the host ---------------------------------------------------
if [ $NOBUILD = 0 ]; then
    log "building test_hw_verbs ternd tern_cli in $BUILD"
    mkdir -p "$BUILD"
    # -U: this runner sets no project include hook; clear one a build dir
    # may carry in its cache.
    cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug \
        -UCMAKE_PROJECT_tern_INCLUDE >"$BUILD/rxe-cmake.log" 2>&1 ||
        { cat "$BUILD/rxe-cmake.log" >&2; fail "configure failed"; }
    cmake --build "$BUILD" --target test_hw_verbs ternd tern_cli -j2 >&2 ||
        fail "build failed"
fi
# Each binary by its file name, wherever the build tree puts it (the CLI
# target tern_cli writes "tern"): the newest regular executable of that
# name, never the staged copy in $WORK (newer, and deleted just below).
WORK=$BUILD/rxe-work
built() { # file name
    find "$BUILD" \( -path "$WORK" -o -name CMakeFiles \) -prune -o \
        -name "$1" -type f -perm -u+x -printf '%T@ %p\n' |
        sort -n | tail -n 1 | cut -d' ' -f2-
}
BIN=$(built test_hw_verbs)
[ -n "$BIN" ] || fail "test_hw_verbs not built in $BUILD (libibverbs-dev/librdmacm-dev missing? scripts/install-deps.sh)"

# Stage the binary and its shared libraries (minus glibc and rdma-core,
# which the guest has) in the 9p work dir.
rm -rf "$WORK"
mkdir -p "$WORK/lib"
cp "$BIN" "$WORK/" || fail "staging $BIN failed"
BINS=("$BIN")
case ",$STAGES," in *,cluster,*)
    for name in ternd tern; do
        b=$(built $name)
        [ -n "$b" ] || fail "$name not built in $BUILD"
        cp "$b" "$WORK/$name"
        BINS+=("$b")
    done
    cp "$REPO/tests/rxe/cluster.sh" "$REPO/scripts/tern-certs.sh" "$WORK/"
    ;;
esac
cp "$REPO/scripts/rxe-setup.sh" "$WORK/"
ldd "${BINS[@]}" | awk '/=> \//{print $3}' | sort -u | while read -r l; do
    case $(basename "$l") in
    libc.so.* | ld-linux* | libibverbs.so.* | librdmacm.so.* | libnl-*) ;;
    *) cp -L "$l" "$WORK/lib/" ;;
    esac
done
# The script the guest (or, natively, this host) runs: the topology by
# scripts/rxe-setup.sh, then the stages, then the summed counts.
# shellcheck disable=SC2016 # quotes inside the generated script
cat >"$WORK/guest.sh" <<EOF
echo "rxe-guest: up"
W=\${TERN_RXE_WORK:-/mnt/work}
bash \$W/rxe-setup.sh up -n 3 -e \$W/rxe.env || { echo 'rxe-guest: rxe-setup.sh up failed'; echo '0 passed, 1 failed'; exit 1; }
set -a; . \$W/rxe.env; set +a
trap 'bash \$W/rxe-setup.sh down -e \$W/rxe.env >/dev/null' EXIT
echo 'rxe-guest: topology by scripts/rxe-setup.sh'
$(env | grep -E '^TERN_(HW_[A-Z_]+|RXE_[A-Z_]+|VERBS_TRACE)=' |
    grep -vE '^TERN_RXE_(CACHE|ACCEL|KERNEL_[A-Z]+|GUEST_EXTRA)=' |
    sed "s/^/export /; s/=\(.*\)/='\1'/")
export LD_LIBRARY_PATH=\$W/lib
# Wire faults for tests/hw (node 2 = 10.77.0.2 = veth n1 <-> bridge port p1).
# tc by its full path: system() runs /bin/sh, which in the guest is busybox
# sh, whose own tc applet would win over PATH.
TC=\$(command -v tc) || { echo 'rxe-guest: no tc'; echo '0 passed, 1 failed'; exit 1; }
export TERN_HW_PARTITION="\$TC qdisc add dev p1 root netem loss 100% && \$TC qdisc add dev n1 root netem loss 100%"
export TERN_HW_HEAL="\$TC qdisc del dev p1 root; \$TC qdisc del dev n1 root"
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
    log "booting the rxe guest (timeout ${TMO}s; log $OUT)"
    # shellcheck disable=SC2086 # KEEP is empty or one flag
    "$HERE/guest-run.sh" $KEEP -t "$TMO" -w "$WORK" "$WORK/guest.sh" 2>&1 |
        tee "$OUT"
    rc=${PIPESTATUS[0]}
fi
grep -q '^rxe-guest: up' "$OUT" || fail "the test script never started (rc=$rc)"
counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT" | tail -1)
[ -n "$counts" ] || fail "the tests did not finish (rc=$rc)"
echo "$counts"
if [ "${counts%% passed*}" = 0 ]; then
    echo "rxe: no test ran (filter matched nothing?)"
    exit 1
fi
[ "$rc" = 0 ] && [ "${counts#* passed, }" = "0 failed" ] && exit 0
exit 1
