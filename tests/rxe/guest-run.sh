#!/usr/bin/env bash
# tests/rxe/guest-run.sh: boots the soft-RoCE test guest (Debian's kernel and
# the initramfs of tests/rxe/guest-build.sh, which runs first and is a no-op
# when the cache is up to date) in QEMU and runs one bash script in it.
# The guest has no network device (-nic none): everything stays inside it.
# It boots with rdma_rxe, veth, bridge and netem loaded but no rxe device.
#
# Usage: tests/rxe/guest-run.sh [options] SCRIPT
#        tests/rxe/guest-run.sh [options] -e 'COMMAND LINE'
#        tests/rxe/guest-run.sh [options] -i         (interactive console)
#   -w DIR   share DIR read-write at /mnt/work (9p): the command's cwd; put
#            host-built binaries there, read results back from it
#   -t SECS  overall timeout, boot included (default 600)
#   -m MB    guest memory (default 1024)      -c N  vCPUs (default 2)
#   -k       keep the run dir (console.log, cmd.sh, rc, dmesg.log) and
#            print its path
#   -v       copy the whole console (kernel, /init) to stderr
# Env: TERN_RXE_CACHE (see guest-build.sh); TERN_RXE_ACCEL=tcg|kvm (default:
#      kvm when /dev/kvm is usable, falling back to tcg when KVM cannot
#      start the guest; else tcg with one host thread per vCPU).
# Output: the script's stdout and stderr on stdout, as the guest prints them
# (between the console markers of guest-init.sh); this script's own lines
# and the guest's /init diagnostics on stderr.
# Exit: the script's exit status; 125 when the guest died, hung or timed out
# before reporting one (the console tail goes to stderr and the run dir is
# kept); 2 on a usage error or when the guest could not be built.
#
# QEMU never outlives this script: it runs in this script's process group
# (timeout --foreground), so a group kill from an outer timeout reaches it,
# and both timeout and QEMU get a parent-death signal (setpriv --pdeathsig).
set -euo pipefail
shopt -s lastpipe

HERE=$(cd "$(dirname "$0")" && pwd)
WORK="" TMO=600 MEM=1024 CPUS=2 KEEP=0 VERBOSE=0 CMD="" INTERACTIVE=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
log() { echo "guest-run: $*" >&2; }
while getopts "w:t:m:c:e:kvi" o; do
    case $o in
    w) WORK=$OPTARG ;;
    t) TMO=$OPTARG ;;
    m) MEM=$OPTARG ;;
    c) CPUS=$OPTARG ;;
    e) CMD=$OPTARG ;;
    k) KEEP=1 ;;
    v) VERBOSE=1 ;;
    i) INTERACTIVE=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
SCRIPT=${1:-}
[ $# -le 1 ] || usage
[ -n "$SCRIPT" ] || [ -n "$CMD" ] || [ $INTERACTIVE = 1 ] || usage
[ -z "$SCRIPT" ] || [ -f "$SCRIPT" ] || { log "no such script: $SCRIPT"; exit 2; }
if [ -n "$WORK" ]; then
    WORK=$(cd "$WORK" && pwd) || exit 2
    case $WORK in *,*) log "the work dir may not contain a comma: $WORK"; exit 2 ;; esac
fi

envf=$("$HERE/guest-build.sh") || { log "the guest could not be built"; exit 2; }
GUEST_KERNEL="" GUEST_INITRD=""
# shellcheck disable=SC1090
. "$envf"

RUN=$(mktemp -d "${TMPDIR:-/tmp}/tern-guest.XXXXXX")
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ "$KEEP" = 1 ]; then log "run dir kept: $RUN"; else rm -rf "$RUN"; fi
}
trap cleanup EXIT
if [ -n "$SCRIPT" ]; then
    cp "$SCRIPT" "$RUN/cmd.sh"
elif [ -n "$CMD" ]; then
    printf '%s\n' "$CMD" >"$RUN/cmd.sh"
fi

# Accelerators to try: TERN_RXE_ACCEL, else KVM when /dev/kvm is usable
# and TCG after it (a nested KVM can refuse the guest's CPU at start, e.g.
# "failed to set MSR 0x10a"; the guest then never begins and TCG runs it).
if [ -n "${TERN_RXE_ACCEL:-}" ]; then
    accels=("$TERN_RXE_ACCEL")
elif [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    accels=(kvm tcg)
else
    accels=(tcg)
fi
for a in "${accels[@]}"; do
    case $a in
    kvm | tcg) ;;
    *) log "TERN_RXE_ACCEL must be tcg or kvm"; exit 2 ;;
    esac
done
append="console=ttyS0 quiet loglevel=4 panic=-1 oops=panic"
if [ -n "$WORK" ]; then
    append="$append tern.work=1"
fi

# The console: every line to console.log; the command's lines to stdout.
BEGIN_MARK="<<<tern-guest begin>>>"
END_MARK="<<<tern-guest end rc="

# Boot the guest once with accelerator $1; sets rc (the command's exit
# status, or not a number), qrc (QEMU's) and began (1 once the command
# started).
boot_guest() {
    local accel
    case $1 in
    kvm) accel=(-accel kvm -cpu host) ;;
    tcg) accel=(-accel "tcg,thread=multi" -cpu max) ;;
    esac
    qemu=(qemu-system-x86_64 -nodefaults -no-user-config -no-reboot
        -machine pc "${accel[@]}" -m "$MEM" -smp "$CPUS"
        -display none -nic none -kernel "$GUEST_KERNEL" -initrd "$GUEST_INITRD"
        -virtfs "local,path=$RUN,mount_tag=run,security_model=none,id=run")
    # qboot is a minimal firmware that starts a PVH kernel faster than
    # SeaBIOS.
    if [ -f /usr/share/qemu/qboot.rom ]; then
        qemu+=(-bios /usr/share/qemu/qboot.rom)
    fi
    if [ -n "$WORK" ]; then
        qemu+=(-virtfs "local,path=$WORK,mount_tag=work,security_model=none,id=work")
    fi
    qemu+=(-append "$append")
    guarded=(setpriv --pdeathsig TERM timeout --foreground -k 5 "$TMO"
        setpriv --pdeathsig KILL "${qemu[@]}")
    if [ $INTERACTIVE = 1 ]; then
        "${guarded[@]}" -serial mon:stdio || true
        exit 0
    fi
    rc="" began=0
    local state=boot
    exec 3>"$RUN/console.log"
    set +e
    "${guarded[@]}" -serial stdio </dev/null 2>"$RUN/qemu.err" |
        while IFS= read -r line || [ -n "$line" ]; do
            line=${line%$'\r'}
            printf '%s\n' "$line" >&3
            [ $VERBOSE = 0 ] || printf '%s\n' "$line" >&2
            case $state in
            boot)
                if [ "$line" = "$BEGIN_MARK" ]; then
                    state=running
                elif [ $VERBOSE = 0 ] && [ "${line#tern-guest: }" != "$line" ]; then
                    printf '%s\n' "$line" >&2
                fi
                ;;
            running)
                case $line in
                "$END_MARK"*">>>")
                    rc=${line#"$END_MARK"}
                    rc=${rc%">>>"}
                    state=finished
                    ;;
                *) printf '%s\n' "$line" ;;
                esac
                ;;
            esac
        done
    qrc=${PIPESTATUS[0]}
    set -e
    exec 3>&-
    if grep -qxF "$BEGIN_MARK" "$RUN/console.log"; then began=1; fi
    # The pipeline's loop ran in a subshell: the command's status comes
    # from its end mark in the console log, or from the rc file.
    if grep -q "^$END_MARK[0-9]*>>>" "$RUN/console.log"; then
        rc=$(grep "^$END_MARK[0-9]*>>>" "$RUN/console.log" | tail -n 1)
        rc=${rc#"$END_MARK"}
        rc=${rc%">>>"}
    fi
}

t0=$SECONDS
for ACCEL in "${accels[@]}"; do
    boot_guest "$ACCEL"
    if [[ $rc =~ ^[0-9]+$ ]] || [ "$began" = 1 ] ||
        [ "$ACCEL" = "${accels[-1]}" ]; then
        break
    fi
    log "$ACCEL could not start the guest (QEMU exited with $qrc):"
    if [ -s "$RUN/qemu.err" ]; then sed 's/^/qemu: /' "$RUN/qemu.err" >&2; fi
    log "trying the next accelerator"
done

if ! [[ $rc =~ ^[0-9]+$ ]]; then
    rc=$(cat "$RUN/rc" 2>/dev/null || true)
fi
if ! [[ $rc =~ ^[0-9]+$ ]]; then
    what="QEMU exited with $qrc"
    [ "$qrc" != 124 ] || what="timed out after $TMO s"
    log "the guest reported no exit status ($what); console tail:"
    tail -n 40 "$RUN/console.log" >&2 || true
    if [ -s "$RUN/qemu.err" ]; then sed 's/^/qemu: /' "$RUN/qemu.err" >&2; fi
    KEEP=1
    rc=125
fi
log "$ACCEL guest, wall $((SECONDS - t0)) s, rc=$rc"
exit "$rc"
